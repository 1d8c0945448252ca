/* The trace area: recording is off until started, an op call records its op,
 * compile and device-execution spans with sane times, a transfer records a
 * transfer, the Chrome trace file is JSON naming them, cursors and nesting,
 * and NULL, out-of-range and destroyed handles. */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Finds the first span of `category` named `name` in `t`; 1 if found. */
static int find(const ttpu_trace_t *t, int32_t category, const char *name, ttpu_trace_span_t *out) {
    for (size_t i = 0; i < ttpu_trace_count(t); ++i) {
        ttpu_trace_span_t s;
        s.struct_size = sizeof s;
        CHECK_OK(ttpu_trace_get(t, i, &s));
        if (s.category == category && s.name_len == strlen(name) && memcmp(s.name, name, s.name_len) == 0) {
            *out = s;
            return 1;
        }
    }
    return 0;
}

static ttpu_tensor_t *add(ttpu_runtime_t *rt, ttpu_tensor_t *a) {
    ttpu_value_t args[2] = {test_tensor_arg(a), test_tensor_arg(a)};
    ttpu_value_t out[1];
    size_t n = 0;
    CHECK_OK(ttpu_op_call(rt, "aten::add.Tensor", args, 2, out, 1, &n));
    return (ttpu_tensor_t *)out[0].ptr;
}

int main(void) {
    ttpu_runtime_t *rt = test_runtime();
    const float x[3] = {1, 2, 3};
    const int64_t s3[1] = {3};
    ttpu_tensor_t *a = test_f32(rt, x, s3, 1);

    /* Off: an op records nothing. */
    CHECK(!ttpu_trace_enabled());
    uint64_t before = ttpu_trace_cursor();
    ttpu_tensor_t *r0 = add(rt, a);
    CHECK_OK(ttpu_runtime_synchronize(rt));
    ttpu_trace_t *t = NULL;
    CHECK_OK(ttpu_trace_read(before, &t));
    CHECK(ttpu_trace_count(t) == 0);
    ttpu_trace_destroy(t);

    /* On: a new signature compiles, runs on the device, and is read back. */
    struct timespec now;
    CHECK(timespec_get(&now, TIME_UTC) == TIME_UTC);
    const uint64_t wall = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    uint64_t cursor = ttpu_trace_start();
    CHECK(ttpu_trace_enabled());
    const float y[5] = {1, 2, 3, 4, 5};
    const int64_t s5[1] = {5};
    ttpu_tensor_t *b = test_f32(rt, y, s5, 1);
    ttpu_tensor_t *r1 = add(rt, b);
    const float want[5] = {2, 4, 6, 8, 10};
    CHECK_F32(rt, r1, want, 5);
    CHECK_OK(ttpu_runtime_synchronize(rt));
    ttpu_trace_stop();
    CHECK(!ttpu_trace_enabled());

    CHECK_OK(ttpu_trace_read(cursor, &t));
    ttpu_trace_span_t op, compile, exec, h2d, d2h;
    CHECK(find(t, TTPU_TRACE_CATEGORY_OP, "aten::add.Tensor", &op));
    CHECK(find(t, TTPU_TRACE_CATEGORY_COMPILE, "aten::add.Tensor", &compile));
    CHECK(find(t, TTPU_TRACE_CATEGORY_EXECUTE, "aten::add.Tensor", &exec));
    CHECK(find(t, TTPU_TRACE_CATEGORY_TRANSFER, "host_to_device", &h2d));
    CHECK(find(t, TTPU_TRACE_CATEGORY_TRANSFER, "device_to_host", &d2h));
    /* Unix-epoch nanoseconds, within a minute of the clock read above. */
    CHECK(op.start_ns + 1000000 >= wall && op.start_ns < wall + 60000000000u);
    /* The compile happened inside the op call, on the same thread. */
    CHECK(compile.start_ns >= op.start_ns);
    CHECK(compile.start_ns + compile.duration_ns <= op.start_ns + op.duration_ns);
    CHECK(compile.thread == op.thread && compile.duration_ns > 0);
    CHECK(compile.device == -1 && exec.device == 0 && h2d.device == 0);
    /* Launched after the compile; detail says what moved. */
    CHECK(exec.start_ns >= compile.start_ns + compile.duration_ns);
    CHECK(h2d.detail_len > 0 && memcmp(h2d.detail, "20 B", 4) == 0);
    CHECK(ttpu_trace_next(t) >= cursor + ttpu_trace_count(t));
    ttpu_trace_span_t s;
    s.struct_size = sizeof s;
    CHECK_CODE(ttpu_trace_get(t, ttpu_trace_count(t), &s), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_trace_get(t, 0, NULL), TTPU_CODE_INVALID_ARGUMENT);
    s.struct_size = 8; /* older than version 1 */
    CHECK_CODE(ttpu_trace_get(t, 0, &s), TTPU_CODE_INVALID_ARGUMENT);

    /* A read from the snapshot's end sees nothing new (recording is off). */
    ttpu_trace_t *t2 = NULL;
    CHECK_OK(ttpu_trace_read(ttpu_trace_next(t), &t2));
    CHECK(ttpu_trace_count(t2) == 0);
    ttpu_trace_destroy(t2);

    /* The Chrome trace file. */
    char path[64];
    snprintf(path, sizeof path, "/tmp/ttpu_trace_test_%d.json", (int)getpid());
    size_t written = 0;
    CHECK_OK(ttpu_trace_write(path, cursor, &written));
    CHECK(written == ttpu_trace_count(t));
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    char buf[65536];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    buf[len] = 0;
    fclose(f);
    unlink(path);
    CHECK(strncmp(buf, "{\"", 2) == 0 && strstr(buf, "\"traceEvents\"") != NULL);
    CHECK(strstr(buf, "\"cat\":\"compile\"") != NULL && strstr(buf, "\"cat\":\"execute\"") != NULL);
    CHECK(strstr(buf, "\"name\":\"aten::add.Tensor\"") != NULL && strstr(buf, "\"tpu:0\"") != NULL);

    /* Hostile input. */
    CHECK_CODE(ttpu_trace_write(NULL, 0, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_trace_write("/nonexistent-dir/x/trace.json", 0, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_trace_read(0, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK(ttpu_trace_count(NULL) == 0 && ttpu_trace_next(NULL) == 0);
    ttpu_trace_destroy(t);
    CHECK(ttpu_trace_count(t) == 0); /* destroyed: quarantined, not read */
    CHECK_CODE(ttpu_trace_get(t, 0, &s), TTPU_CODE_INVALID_ARGUMENT);
    ttpu_trace_destroy(t); /* twice: a no-op */
    ttpu_trace_destroy(NULL);
    ttpu_trace_stop(); /* unbalanced: a no-op */
    CHECK(!ttpu_trace_enabled());

    /* Nesting: on until every start is undone. */
    ttpu_trace_start();
    ttpu_trace_start();
    ttpu_trace_stop();
    CHECK(ttpu_trace_enabled());
    ttpu_trace_stop();
    CHECK(!ttpu_trace_enabled());

    ttpu_tensor_destroy(r0);
    ttpu_tensor_destroy(r1);
    ttpu_tensor_destroy(a);
    ttpu_tensor_destroy(b);
    ttpu_runtime_destroy(rt);
    puts("test_trace: ok");
    return 0;
}
