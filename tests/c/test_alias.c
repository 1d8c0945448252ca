/* The shared in-place, out= and alias cases (tests/shared/alias_cases.txt,
 * whose header explains the format) as a C caller runs them, in strict and
 * in fused mode. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#define MAX_TOKENS 64
#define MAX_VARS 16
#define MAX_DIMS 8
#define MAX_ELEMS 64

typedef struct {
    char name[32];
    ttpu_tensor_t *t;
} var_t;

typedef struct {
    const char *path;
    int line;
    const char *mode;
    char case_name[128];
    var_t vars[MAX_VARS];
    size_t nvars;
    /* The last call's error, if it failed (checked by an `error` line). */
    ttpu_error_t *err;
} state_t;

static void fail(const state_t *s, const char *what, const char *detail) {
    fprintf(stderr, "%s:%d: case %s (%s mode): %s %s\n", s->path, s->line, s->case_name, s->mode, what, detail);
    exit(1);
}

static ttpu_tensor_t *var(state_t *s, const char *name) {
    for (size_t i = 0; i < s->nvars; i++) {
        if (strcmp(s->vars[i].name, name) == 0) return s->vars[i].t;
    }
    fail(s, "no tensor named", name);
    return NULL;
}

static void set_var(state_t *s, const char *name, ttpu_tensor_t *t) {
    if (strlen(name) >= sizeof s->vars[0].name) fail(s, "name too long:", name);
    for (size_t i = 0; i < s->nvars; i++) {
        if (strcmp(s->vars[i].name, name) == 0) {
            ttpu_tensor_destroy(s->vars[i].t);
            s->vars[i].t = t;
            return;
        }
    }
    if (s->nvars == MAX_VARS) fail(s, "too many tensors at", name);
    snprintf(s->vars[s->nvars].name, sizeof s->vars[0].name, "%s", name);
    s->vars[s->nvars++].t = t;
}

static int32_t dtype_of(state_t *s, const char *d) {
    if (strcmp(d, "f32") == 0) return TTPU_DTYPE_FLOAT32;
    if (strcmp(d, "f64") == 0) return TTPU_DTYPE_FLOAT64;
    if (strcmp(d, "i64") == 0) return TTPU_DTYPE_INT64;
    fail(s, "unknown dtype", d);
    return -1;
}

static int64_t parse_int(state_t *s, const char *text) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') fail(s, "not an integer:", text);
    return (int64_t)v;
}

/* "2,3" -> {2, 3}; "-" -> 0-d. Returns the count. */
static size_t parse_ints(state_t *s, const char *text, int64_t *out, size_t cap) {
    if (strcmp(text, "-") == 0) return 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", text);
    size_t n = 0;
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p != NULL; p = strtok_r(NULL, ",", &save)) {
        if (n == cap) fail(s, "too many ints in", text);
        out[n++] = parse_int(s, p);
    }
    return n;
}

/* Reads `DTYPE SIZES = V...` from tok[0..]: the dtype, sizes and values
 * (as doubles; exact for the small integers the cases use). */
typedef struct {
    int32_t dtype;
    int64_t sizes[MAX_DIMS];
    size_t ndim;
    double values[MAX_ELEMS];
    size_t n;
} spec_t;

static spec_t parse_spec(state_t *s, char **tok, size_t ntok) {
    spec_t sp = {0};
    if (ntok < 3 || strcmp(tok[2], "=") != 0) fail(s, "expected DTYPE SIZES = VALUES", "");
    sp.dtype = dtype_of(s, tok[0]);
    sp.ndim = parse_ints(s, tok[1], sp.sizes, MAX_DIMS);
    size_t numel = 1;
    for (size_t i = 0; i < sp.ndim; i++) numel *= (size_t)sp.sizes[i];
    if (ntok - 3 != numel || numel > MAX_ELEMS) fail(s, "value count does not match the sizes", tok[1]);
    for (size_t i = 3; i < ntok; i++) {
        char *end = NULL;
        sp.values[sp.n++] = strtod(tok[i], &end);
        if (end == tok[i] || *end != '\0') fail(s, "not a number:", tok[i]);
    }
    return sp;
}

/* Host elements of any of the case file's dtypes. */
typedef union {
    float f32[MAX_ELEMS];
    double f64[MAX_ELEMS];
    int64_t i64[MAX_ELEMS];
} elems_t;

static ttpu_tensor_t *make_tensor(state_t *s, ttpu_runtime_t *rt, const spec_t *sp) {
    elems_t buf;
    size_t item = sp->dtype == TTPU_DTYPE_FLOAT32 ? 4 : 8;
    for (size_t i = 0; i < sp->n; i++) {
        if (sp->dtype == TTPU_DTYPE_FLOAT32) buf.f32[i] = (float)sp->values[i];
        if (sp->dtype == TTPU_DTYPE_FLOAT64) buf.f64[i] = sp->values[i];
        if (sp->dtype == TTPU_DTYPE_INT64) buf.i64[i] = (int64_t)sp->values[i];
    }
    ttpu_tensor_t *t = NULL;
    ttpu_error_t *e = ttpu_tensor_from_host(rt, &buf, sp->n * item, sp->dtype, sp->sizes, sp->ndim, 0, &t);
    if (e != NULL) fail(s, "ttpu_tensor_from_host:", ttpu_error_message(e));
    return t;
}

static void check_want(state_t *s, ttpu_runtime_t *rt, ttpu_tensor_t *t, const spec_t *sp) {
    if (ttpu_tensor_dtype(t) != sp->dtype) fail(s, "dtype differs", "");
    if (ttpu_tensor_ndim(t) != sp->ndim ||
        (sp->ndim > 0 && memcmp(ttpu_tensor_sizes(t), sp->sizes, sp->ndim * sizeof(int64_t)) != 0)) {
        fail(s, "sizes differ", "");
    }
    elems_t buf;
    size_t item = sp->dtype == TTPU_DTYPE_FLOAT32 ? 4 : 8;
    ttpu_error_t *e = ttpu_tensor_to_host(rt, t, &buf, sp->n * item);
    if (e != NULL) fail(s, "ttpu_tensor_to_host:", ttpu_error_message(e));
    for (size_t i = 0; i < sp->n; i++) {
        double got = sp->dtype == TTPU_DTYPE_FLOAT32   ? (double)buf.f32[i]
                     : sp->dtype == TTPU_DTYPE_FLOAT64 ? buf.f64[i]
                                                       : (double)buf.i64[i];
        if (got != sp->values[i]) {
            char detail[96];
            snprintf(detail, sizeof detail, "element %zu is %g, want %g", i, got, sp->values[i]);
            fail(s, "value differs:", detail);
        }
    }
}

static void call(state_t *s, ttpu_runtime_t *rt, char **tok, size_t ntok) {
    const char *result = NULL;
    if (ntok >= 2 && strcmp(tok[1], "=") == 0) {
        result = tok[0];
        tok += 2;
        ntok -= 2;
    }
    if (ntok == 0) fail(s, "call without an op", "");
    const char *op = tok[0];
    ttpu_value_t args[MAX_TOKENS];
    int64_t lists[MAX_TOKENS][MAX_DIMS];
    size_t nargs = 0;
    for (size_t i = 1; i < ntok; i++) {
        const char *a = tok[i];
        ttpu_value_t v = {TTPU_VALUE_KIND_NONE, 0, 0.0, NULL, 0};
        if (strncmp(a, "i:", 2) == 0) {
            v.kind = TTPU_VALUE_KIND_INT;
            v.i = parse_int(s, a + 2);
        } else if (strncmp(a, "f:", 2) == 0) {
            v.kind = TTPU_VALUE_KIND_DOUBLE;
            v.d = strtod(a + 2, NULL);
        } else if (strncmp(a, "b:", 2) == 0) {
            v.kind = TTPU_VALUE_KIND_BOOL;
            v.i = parse_int(s, a + 2) != 0;
        } else if (strncmp(a, "ints:", 5) == 0) {
            v.kind = TTPU_VALUE_KIND_INT_LIST;
            v.len = parse_ints(s, a + 5, lists[nargs], MAX_DIMS);
            v.ptr = lists[nargs];
        } else if (strcmp(a, "none") != 0) {
            v.kind = TTPU_VALUE_KIND_TENSOR;
            v.ptr = var(s, a);
        }
        args[nargs++] = v;
    }
    ttpu_value_t out[8];
    size_t n = 0;
    s->err = ttpu_op_call(rt, op, args, nargs, out, 8, &n);
    if (s->err != NULL) return;
    for (size_t i = 0; i < n; i++) {
        ttpu_tensor_t *t = (ttpu_tensor_t *)out[i].ptr;
        if (i == 0 && result != NULL) {
            set_var(s, result, t);
        } else if (t != NULL) {
            ttpu_tensor_destroy(t);
        }
    }
}

/* The rest of the line after its first word. */
static const char *rest_of(const char *line) {
    const char *p = strchr(line, ' ');
    return p == NULL ? "" : p + 1;
}

static int run_file(const char *path, ttpu_runtime_t *rt, const char *mode) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    state_t s = {.path = path, .mode = mode};
    char line[1024];
    int cases = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        s.line++;
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0') continue;
        char copy[1024];
        snprintf(copy, sizeof copy, "%s", line);
        char *tok[MAX_TOKENS];
        size_t ntok = 0;
        for (char *save = NULL, *p = strtok_r(copy, " ", &save); p != NULL; p = strtok_r(NULL, " ", &save)) {
            if (ntok == MAX_TOKENS) fail(&s, "too many tokens", "");
            tok[ntok++] = p;
        }
        const char *d = tok[0];
        if (s.err != NULL && strcmp(d, "error") != 0) fail(&s, "call failed:", ttpu_error_message(s.err));
        if (strcmp(d, "case") == 0) {
            snprintf(s.case_name, sizeof s.case_name, "%s", ntok > 1 ? tok[1] : "?");
        } else if (strcmp(d, "tensor") == 0) {
            spec_t sp = parse_spec(&s, tok + 2, ntok - 2);
            set_var(&s, tok[1], make_tensor(&s, rt, &sp));
        } else if (strcmp(d, "view") == 0) {
            if (ntok != 6) fail(&s, "view T BASE SIZES STRIDES OFFSET", "");
            int64_t sizes[MAX_DIMS], strides[MAX_DIMS];
            size_t nd = parse_ints(&s, tok[3], sizes, MAX_DIMS);
            if (parse_ints(&s, tok[4], strides, MAX_DIMS) != nd) fail(&s, "sizes and strides differ in rank", "");
            ttpu_tensor_t *v = NULL;
            CHECK_OK(ttpu_tensor_view(var(&s, tok[2]), sizes, strides, nd, parse_int(&s, tok[5]), &v));
            set_var(&s, tok[1], v);
        } else if (strcmp(d, "declare") == 0) {
            bool supported = false;
            CHECK_OK(ttpu_op_declare(rest_of(line), &supported));
            if (!supported) fail(&s, "declaration not supported:", rest_of(line));
        } else if (strcmp(d, "call") == 0) {
            call(&s, rt, tok + 1, ntok - 1);
        } else if (strcmp(d, "same") == 0) {
            if (ntok != 3) fail(&s, "same R T", "");
            if (!ttpu_tensor_same_storage(var(&s, tok[1]), var(&s, tok[2]))) fail(&s, "not the same storage:", tok[1]);
        } else if (strcmp(d, "want") == 0) {
            spec_t sp = parse_spec(&s, tok + 2, ntok - 2);
            check_want(&s, rt, var(&s, tok[1]), &sp);
        } else if (strcmp(d, "error") == 0) {
            if (s.err == NULL) fail(&s, "the call succeeded; expected an error with", rest_of(line));
            if (strstr(ttpu_error_message(s.err), rest_of(line)) == NULL) {
                fail(&s, "unexpected error:", ttpu_error_message(s.err));
            }
            ttpu_error_destroy(s.err);
            s.err = NULL;
        } else if (strcmp(d, "end") == 0) {
            for (size_t i = 0; i < s.nvars; i++) ttpu_tensor_destroy(s.vars[i].t);
            s.nvars = 0;
            cases++;
        } else {
            fail(&s, "unknown directive", d);
        }
    }
    fclose(f);
    CHECK(s.nvars == 0 && s.err == NULL);
    return cases;
}

int main(void) {
    ttpu_runtime_t *rt = test_runtime();
    const char *path = "tests/shared/alias_cases.txt";
    int strict = run_file(path, rt, "strict");
    CHECK_OK(ttpu_process_set_mode(TTPU_MODE_DEFER_AND_FUSE));
    int fused = run_file(path, rt, "fused");
    CHECK_OK(ttpu_process_set_mode(TTPU_MODE_DEFER_NEVER));
    CHECK(strict > 10 && strict == fused);
    ttpu_runtime_destroy(rt);
    printf("test_alias: %d cases in strict and fused mode passed\n", strict);
    return 0;
}
