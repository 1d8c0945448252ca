/* Threads on one runtime, and a runtime destroyed while it is busy.
 *
 * 1. Eight threads share one runtime, each in its own mode (strict, fused,
 *    synchronous), and compute (a * b + a) * b on their own data; every
 *    result is checked against the same arithmetic done here in C.
 * 2. Six threads keep calling ops on a second runtime while the main thread
 *    destroys it. Every call either succeeds with the right numbers or fails
 *    with INVALID_ARGUMENT (the runtime is being or was destroyed); nothing
 *    crashes or hangs. (That the destroy waits for a call in progress is
 *    pinned deterministically by a Rust unit test in capi/src/runtime.rs:
 *    ASan does not instrument the Rust library, so a use after free there
 *    would not show here.) Afterwards the
 *    runtime's children fail cleanly: its stream's synchronize, query and
 *    event record give FAILED_PRECONDITION, while tensors can still be
 *    inspected and destroyed. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "check.h"

#define N 64
#define THREADS 8
#define ROUNDS 40
#define BUSY_THREADS 6

/* Calls aten::<name>.Tensor on a and b; returns the owned result, or NULL
 * with *err set (when err is non-NULL; otherwise any error fails the test). */
static ttpu_tensor_t *binary(ttpu_runtime_t *rt, const char *op, ttpu_tensor_t *a,
                             ttpu_tensor_t *b, ttpu_error_t **err) {
    ttpu_value_t args[2] = {test_tensor_arg(a), test_tensor_arg(b)};
    ttpu_value_t out[1];
    size_t n = 0;
    ttpu_error_t *e = ttpu_op_call(rt, op, args, 2, out, 1, &n);
    if (e != NULL) {
        if (err == NULL) CHECK_OK(e);
        *err = e;
        return NULL;
    }
    CHECK(n == 1 && out[0].kind == TTPU_VALUE_KIND_TENSOR);
    return (ttpu_tensor_t *)out[0].ptr;
}

static void fill(float *a, float *b, int seed) {
    for (int i = 0; i < N; i++) {
        a[i] = (float)((seed * 7 + i) % 13) - 6.0f;
        b[i] = (float)((seed * 3 + i) % 5) * 0.5f - 1.0f;
    }
}

/* ------------------------------------------------- 1. threads, mixed modes */

typedef struct {
    ttpu_runtime_t *rt;
    int index;
    int checked; /* results compared, written by the thread */
} worker_t;

static void *mixed_worker(void *arg) {
    worker_t *w = arg;
    static const int32_t modes[3] = {TTPU_MODE_DEFER_NEVER, TTPU_MODE_DEFER_AND_FUSE,
                                     TTPU_MODE_DEFER_NEVER_AND_LAUNCH_BLOCKING};
    CHECK_OK(ttpu_thread_set_mode(modes[w->index % 3]));
    CHECK(ttpu_thread_effective_mode() == modes[w->index % 3]);
    const int64_t shape[1] = {N};
    for (int r = 0; r < ROUNDS; r++) {
        float a[N], b[N], got[N];
        fill(a, b, w->index * ROUNDS + r);
        ttpu_tensor_t *ta = test_f32(w->rt, a, shape, 1);
        ttpu_tensor_t *tb = test_f32(w->rt, b, shape, 1);
        ttpu_tensor_t *ab = binary(w->rt, "aten::mul.Tensor", ta, tb, NULL);
        ttpu_tensor_t *s = binary(w->rt, "aten::add.Tensor", ab, ta, NULL);
        ttpu_tensor_t *y = binary(w->rt, "aten::mul.Tensor", s, tb, NULL);
        CHECK_OK(ttpu_tensor_to_host(w->rt, y, got, sizeof got));
        for (int i = 0; i < N; i++) {
            /* Small integers and halves: exact in float32 either way. */
            float want = (a[i] * b[i] + a[i]) * b[i];
            if (got[i] != want) {
                fprintf(stderr, "thread %d round %d element %d: got %g, want %g\n", w->index, r, i,
                        (double)got[i], (double)want);
                exit(1);
            }
        }
        w->checked++;
        ttpu_tensor_destroy(y);
        ttpu_tensor_destroy(s);
        ttpu_tensor_destroy(ab);
        ttpu_tensor_destroy(tb);
        ttpu_tensor_destroy(ta);
    }
    CHECK_OK(ttpu_thread_set_mode(-1));
    return NULL;
}

static void threads_on_one_runtime(void) {
    ttpu_runtime_t *rt = test_runtime();
    pthread_t tid[THREADS];
    worker_t w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker_t){rt, i, 0};
        CHECK(pthread_create(&tid[i], NULL, mixed_worker, &w[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_join(tid[i], NULL) == 0);
        CHECK(w[i].checked == ROUNDS);
    }
    CHECK_OK(ttpu_runtime_synchronize(rt));
    ttpu_runtime_destroy(rt);
}

/* --------------------------------------------- 2. destroy while it is busy */

static atomic_int calls_ok;
static atomic_int calls_refused;

typedef struct {
    ttpu_runtime_t *rt;
    int index;
    ttpu_tensor_t *a, *b; /* made before the destroy, freed by the thread */
    float ha[N], hb[N];
} busy_t;

/* An error of a call racing the destroy: it must say the runtime is gone. */
static void expect_refused(ttpu_error_t *e) {
    const char *msg = ttpu_error_message(e);
    if (ttpu_error_code(e) != TTPU_CODE_INVALID_ARGUMENT ||
        (strstr(msg, "being destroyed") == NULL && strstr(msg, "already destroyed") == NULL)) {
        fprintf(stderr, "a call racing the destroy failed otherwise: code %d: %s\n",
                (int)ttpu_error_code(e), msg);
        exit(1);
    }
    ttpu_error_destroy(e);
    atomic_fetch_add(&calls_refused, 1);
}

static void *busy_worker(void *arg) {
    busy_t *w = arg;
    if (w->index % 2) CHECK_OK(ttpu_thread_set_mode(TTPU_MODE_DEFER_AND_FUSE));
    for (;;) {
        ttpu_error_t *e = NULL;
        ttpu_tensor_t *y = binary(w->rt, "aten::mul.Tensor", w->a, w->b, &e);
        if (y == NULL) {
            expect_refused(e);
            break;
        }
        float got[N];
        e = ttpu_tensor_to_host(w->rt, y, got, sizeof got);
        ttpu_tensor_destroy(y);
        if (e != NULL) {
            expect_refused(e);
            break;
        }
        for (int i = 0; i < N; i++) CHECK(got[i] == w->ha[i] * w->hb[i]);
        atomic_fetch_add(&calls_ok, 1);
    }
    /* The runtime is gone; its tensors are still handles that work here. */
    CHECK(ttpu_tensor_ndim(w->a) == 1);
    CHECK(ttpu_tensor_sizes(w->a)[0] == N);
    ttpu_tensor_destroy(w->a);
    ttpu_tensor_destroy(w->b);
    CHECK_OK(ttpu_thread_set_mode(-1));
    return NULL;
}

static void destroy_while_busy(void) {
    ttpu_runtime_t *rt = test_runtime();
    const int64_t shape[1] = {N};
    ttpu_stream_t *s = NULL;
    CHECK_OK(ttpu_stream_create(rt, 0, &s));
    ttpu_event_t *ev = NULL;
    CHECK_OK(ttpu_event_create(&ev));

    pthread_t tid[BUSY_THREADS];
    busy_t w[BUSY_THREADS];
    for (int i = 0; i < BUSY_THREADS; i++) {
        w[i].rt = rt;
        w[i].index = i;
        fill(w[i].ha, w[i].hb, 100 + i);
        w[i].a = test_f32(rt, w[i].ha, shape, 1);
        w[i].b = test_f32(rt, w[i].hb, shape, 1);
    }
    for (int i = 0; i < BUSY_THREADS; i++) CHECK(pthread_create(&tid[i], NULL, busy_worker, &w[i]) == 0);
    /* Let every thread get going (each one's first call compiles). */
    while (atomic_load(&calls_ok) < 4 * BUSY_THREADS) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    ttpu_runtime_destroy(rt);
    for (int i = 0; i < BUSY_THREADS; i++) CHECK(pthread_join(tid[i], NULL) == 0);
    CHECK(atomic_load(&calls_refused) == BUSY_THREADS);
    printf("destroy while busy: %d calls succeeded, %d refused\n", atomic_load(&calls_ok),
           atomic_load(&calls_refused));

    /* Calls on the runtime itself, and on its children. */
    CHECK_CODE_MSG(ttpu_runtime_synchronize(rt), TTPU_CODE_INVALID_ARGUMENT, "already destroyed");
    CHECK_CODE_MSG(ttpu_stream_synchronize(s), TTPU_CODE_FAILED_PRECONDITION, "destroyed");
    bool idle = false;
    CHECK_CODE(ttpu_stream_query(s, &idle), TTPU_CODE_FAILED_PRECONDITION);
    CHECK_CODE(ttpu_event_record(ev, s), TTPU_CODE_FAILED_PRECONDITION);
    CHECK_CODE(ttpu_stream_wait_event(s, ev), TTPU_CODE_FAILED_PRECONDITION);
    CHECK(ttpu_stream_device(s) == 0); /* getters still answer */
    ttpu_event_destroy(ev);
    ttpu_stream_destroy(s);
    ttpu_runtime_destroy(rt); /* a second destroy is a no-op */
}

int main(void) {
    threads_on_one_runtime();
    destroy_while_busy();
    return 0;
}
