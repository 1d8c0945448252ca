/* ttpu_runtime_shutdown: it waits for work in flight, then calls that need
 * the device fail with FAILED_PRECONDITION while every handle can still be
 * destroyed; a second shutdown is a no-op; NULL and destroyed runtimes. */
#include "check.h"

int main(void) {
    ttpu_runtime_t *rt = test_runtime();
    const float a[4] = {1, 2, 3, 4};
    const int64_t s4[1] = {4};
    ttpu_tensor_t *ta = test_f32(rt, a, s4, 1);
    ttpu_stream_t *s = NULL;
    CHECK_OK(ttpu_stream_create(rt, 0, &s));
    ttpu_event_t *ev = NULL;
    CHECK_OK(ttpu_event_create(&ev));
    CHECK_OK(ttpu_event_record(ev, s));

    /* Work in flight (not synchronized) in strict and in fused mode. */
    ttpu_value_t args[2] = {test_tensor_arg(ta), test_tensor_arg(ta)};
    ttpu_value_t out[1];
    size_t n = 0;
    CHECK_OK(ttpu_op_call(rt, "aten::mul.Tensor", args, 2, out, 1, &n));
    ttpu_tensor_t *sq = (ttpu_tensor_t *)out[0].ptr;
    CHECK_OK(ttpu_thread_set_mode(TTPU_MODE_DEFER_AND_FUSE));
    CHECK_OK(ttpu_op_call(rt, "aten::add.Tensor", args, 2, out, 1, &n));
    ttpu_tensor_t *sum = (ttpu_tensor_t *)out[0].ptr;
    CHECK_OK(ttpu_thread_set_mode(-1));

    CHECK_OK(ttpu_runtime_shutdown(rt, 60000));
    /* Idempotent, whatever the timeout. */
    CHECK_OK(ttpu_runtime_shutdown(rt, 0));

    /* Everything that needs the device now fails, with a clear message. */
    float got[4];
    CHECK_CODE_MSG(ttpu_tensor_to_host(rt, sq, got, sizeof got), TTPU_CODE_FAILED_PRECONDITION, "shut down");
    CHECK_CODE(ttpu_tensor_to_host(rt, sum, got, sizeof got), TTPU_CODE_FAILED_PRECONDITION);
    CHECK_CODE(ttpu_op_call(rt, "aten::mul.Tensor", args, 2, out, 1, &n), TTPU_CODE_FAILED_PRECONDITION);
    ttpu_tensor_t *tb = NULL;
    CHECK_CODE(ttpu_tensor_from_host(rt, a, sizeof a, TTPU_DTYPE_FLOAT32, s4, 1, 0, &tb),
               TTPU_CODE_FAILED_PRECONDITION);
    CHECK(tb == NULL);
    CHECK_CODE(ttpu_stream_synchronize(s), TTPU_CODE_FAILED_PRECONDITION);
    CHECK_OK(ttpu_event_synchronize(ev)); /* recorded before: complete */
    /* What needs no device still works. */
    size_t count = 0;
    CHECK_OK(ttpu_runtime_device_count(rt, &count));
    CHECK(count > 0);

    /* Handles made before the shutdown are destroyed without the device. */
    ttpu_tensor_destroy(sq);
    ttpu_tensor_destroy(sum);
    ttpu_tensor_destroy(ta);
    ttpu_event_destroy(ev);
    ttpu_stream_destroy(s);
    ttpu_runtime_destroy(rt);

    CHECK_CODE(ttpu_runtime_shutdown(NULL, 0), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE_MSG(ttpu_runtime_shutdown(rt, 0), TTPU_CODE_INVALID_ARGUMENT, "already destroyed");
    return 0;
}
