/* Device-side index checks through the C ABI: an out-of-range embedding
 * index is TTPU_CODE_OUT_OF_RANGE naming the op and the valid range (at the
 * next read or synchronize; at the op in launch-blocking mode), the runtime
 * stays usable, and ttpu_runtime_set_index_checks turns the check off. */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include <stdlib.h>

#include "check.h"

static ttpu_tensor_t *i64_tensor(ttpu_runtime_t *rt, const int64_t *data, int64_t n) {
    ttpu_tensor_t *t = NULL;
    CHECK_OK(ttpu_tensor_from_host(rt, data, (size_t)n * sizeof(int64_t), TTPU_DTYPE_INT64, &n, 1, 0, &t));
    return t;
}

/* embedding(w, idx) with one result. */
static ttpu_error_t *embed(ttpu_runtime_t *rt, ttpu_tensor_t *w, ttpu_tensor_t *idx, ttpu_tensor_t **out) {
    ttpu_value_t args[2] = {test_tensor_arg(w), test_tensor_arg(idx)};
    ttpu_value_t res[1];
    size_t n = 0;
    *out = NULL;
    ttpu_error_t *e = ttpu_op_call(rt, "aten::embedding", args, 2, res, 1, &n);
    if (e == NULL) {
        CHECK(n == 1 && res[0].kind == TTPU_VALUE_KIND_TENSOR);
        *out = (ttpu_tensor_t *)res[0].ptr;
    }
    return e;
}

int main(void) {
    ttpu_runtime_t *rt = test_runtime();
    const int64_t s32[2] = {3, 2};
    const float w[6] = {0, 1, 2, 3, 4, 5}; /* row r = [2r, 2r + 1] */
    ttpu_tensor_t *tw = test_f32(rt, w, s32, 2);
    const int64_t good[2] = {2, 0}, bad[2] = {1, 3};
    ttpu_tensor_t *tgood = i64_tensor(rt, good, 2), *tbad = i64_tensor(rt, bad, 2);
    ttpu_tensor_t *out = NULL;
    float host[4];

    /* The switch: on by default; NULL runtime or out pointer rejected. */
    bool on = false;
    CHECK_OK(ttpu_runtime_index_checks(rt, &on));
    CHECK(on);
    CHECK_CODE(ttpu_runtime_index_checks(NULL, &on), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_index_checks(rt, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_set_index_checks(NULL, false), TTPU_CODE_INVALID_ARGUMENT);

    /* Strict and fused: the call succeeds, the next read reports it. */
    const int modes[2] = {TTPU_MODE_DEFER_NEVER, TTPU_MODE_DEFER_AND_FUSE};
    for (int m = 0; m < 2; m++) {
        CHECK_OK(ttpu_thread_set_mode(modes[m]));
        CHECK_OK(embed(rt, tw, tbad, &out));
        CHECK_CODE_MSG(ttpu_tensor_to_host(rt, out, host, sizeof host), TTPU_CODE_OUT_OF_RANGE,
                       "aten::embedding: index 3 is out of range for a weight of 3 rows (valid: 0 to 2)");
        /* Reported once; the runtime carries on. */
        CHECK_OK(ttpu_runtime_synchronize(rt));
        ttpu_tensor_destroy(out);
        CHECK_OK(embed(rt, tw, tgood, &out));
        const float want[4] = {4, 5, 0, 1};
        CHECK_F32(rt, out, want, 4);
        ttpu_tensor_destroy(out);
        /* synchronize reports it too. */
        CHECK_OK(embed(rt, tw, tbad, &out));
        CHECK_CODE_MSG(ttpu_runtime_synchronize(rt), TTPU_CODE_OUT_OF_RANGE, "TORCHTPU_LAUNCH_BLOCKING=1");
        ttpu_tensor_destroy(out);
    }

    /* Launch-blocking: the op call itself fails, with no result. */
    CHECK_OK(ttpu_thread_set_mode(TTPU_MODE_DEFER_NEVER_AND_LAUNCH_BLOCKING));
    CHECK_CODE_MSG(embed(rt, tw, tbad, &out), TTPU_CODE_OUT_OF_RANGE, "aten::embedding: index 3");
    CHECK(out == NULL);

    /* Off: no error anywhere (the read clamps), and on again: reported. */
    CHECK_OK(ttpu_thread_set_mode(TTPU_MODE_DEFER_NEVER));
    CHECK_OK(ttpu_runtime_set_index_checks(rt, false));
    CHECK_OK(ttpu_runtime_index_checks(rt, &on));
    CHECK(!on);
    CHECK_OK(embed(rt, tw, tbad, &out));
    CHECK_OK(ttpu_tensor_to_host(rt, out, host, sizeof host));
    CHECK_OK(ttpu_runtime_synchronize(rt));
    ttpu_tensor_destroy(out);
    CHECK_OK(ttpu_runtime_set_index_checks(rt, true));
    CHECK_OK(embed(rt, tw, tbad, &out));
    CHECK_CODE(ttpu_tensor_to_host(rt, out, host, sizeof host), TTPU_CODE_OUT_OF_RANGE);
    ttpu_tensor_destroy(out);

    CHECK_OK(ttpu_thread_set_mode(-1));
    ttpu_tensor_destroy(tgood);
    ttpu_tensor_destroy(tbad);
    ttpu_tensor_destroy(tw);
    ttpu_runtime_destroy(rt);

    /* TORCHTPU_INDEX_CHECKS=0: a runtime created now starts with them off. */
    CHECK(setenv("TORCHTPU_INDEX_CHECKS", "0", 1) == 0);
    rt = test_runtime();
    CHECK_OK(ttpu_runtime_index_checks(rt, &on));
    CHECK(!on);
    ttpu_runtime_destroy(rt);
    return 0;
}
