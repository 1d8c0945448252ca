/* The fusion area: DEFER_AND_FUSE via the thread mode, explicit and
 * host-read flushes, last flush info, fusion stats, policies, flush reason
 * names, the last cache-miss explanation. */
#include <stddef.h>

#include "check.h"

/* y = (x + x) * x, recorded in fused mode. */
static ttpu_tensor_t *record(ttpu_runtime_t *rt, ttpu_tensor_t *x) {
    ttpu_value_t args[2] = {test_tensor_arg(x), test_tensor_arg(x)};
    ttpu_value_t out[1];
    size_t n = 0;
    CHECK_OK(ttpu_op_call(rt, "aten::add.Tensor", args, 2, out, 1, &n));
    ttpu_tensor_t *s = (ttpu_tensor_t *)out[0].ptr;
    args[0] = test_tensor_arg(s);
    CHECK_OK(ttpu_op_call(rt, "aten::mul.Tensor", args, 2, out, 1, &n));
    ttpu_tensor_destroy(s);
    return (ttpu_tensor_t *)out[0].ptr;
}

int main(void) {
    ttpu_runtime_t *rt = test_runtime();

    /* Before any flush: NOT_FOUND. */
    ttpu_flush_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_CODE(ttpu_runtime_last_flush(rt, &info), TTPU_CODE_NOT_FOUND);

    /* Policies. */
    CHECK_OK(ttpu_runtime_set_fusion_policy(rt, "loop_cut"));
    CHECK_OK(ttpu_runtime_set_fusion_policy(rt, "fuse_all"));
    CHECK_OK(ttpu_runtime_set_fusion_policy(rt, "fuse_loops"));
    CHECK_CODE_MSG(ttpu_runtime_set_fusion_policy(rt, "bogus"), TTPU_CODE_INVALID_ARGUMENT, "unknown fusion policy");
    CHECK_CODE(ttpu_runtime_set_fusion_policy(rt, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_set_fusion_max_ops(rt, 0), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_OK(ttpu_runtime_set_fusion_max_ops(rt, 1000));
    CHECK_OK(ttpu_runtime_set_cache_enabled(rt, true));

    /* Flush reason names. */
    CHECK(strcmp(ttpu_flush_reason_name(TTPU_FLUSH_REASON_HOST_READ), "host_read") == 0);
    for (int r = 0; r < TTPU_FLUSH_REASON_COUNT; r++) CHECK(ttpu_flush_reason_name(r) != NULL);
    CHECK(ttpu_flush_reason_name(TTPU_FLUSH_REASON_COUNT) == NULL);
    CHECK(ttpu_flush_reason_name(-1) == NULL);

    /* Fused mode on this thread. */
    CHECK_OK(ttpu_thread_set_mode(TTPU_MODE_DEFER_AND_FUSE));
    CHECK(ttpu_thread_effective_mode() == TTPU_MODE_DEFER_AND_FUSE);
    const float x[4] = {1, 2, 3, 4};
    const int64_t s4[1] = {4};
    ttpu_tensor_t *tx = test_f32(rt, x, s4, 1);
    ttpu_tensor_t *y = record(rt, tx);
    size_t pending = 0;
    CHECK_OK(ttpu_runtime_pending_ops(rt, 0, &pending));
    CHECK(pending >= 2);
    CHECK_CODE(ttpu_runtime_pending_ops(rt, 99, &pending), TTPU_CODE_OUT_OF_RANGE);

    /* Explicit flush. */
    CHECK_OK(ttpu_runtime_flush(rt));
    CHECK_OK(ttpu_runtime_pending_ops(rt, 0, &pending));
    CHECK(pending == 0);
    CHECK_OK(ttpu_runtime_last_flush(rt, &info));
    CHECK(info.reason == TTPU_FLUSH_REASON_EXPLICIT);
    CHECK(info.device == 0 && info.recorded >= 2 && info.outputs >= 1);
    CHECK(info.source == 3); /* compiled */
    const float want[4] = {2, 8, 18, 32};
    CHECK_F32(rt, y, want, 4);
    ttpu_tensor_destroy(y);

    /* The same graph again, flushed by a host read: a memory-cache hit. */
    y = record(rt, tx);
    CHECK_F32(rt, y, want, 4);
    CHECK_OK(ttpu_runtime_last_flush(rt, &info));
    CHECK(info.reason == TTPU_FLUSH_REASON_HOST_READ);
    CHECK(info.source == 1);
    ttpu_tensor_destroy(y);

    /* Fusion stats. */
    ttpu_fusion_stats_t fs;
    memset(&fs, 0, sizeof fs);
    fs.struct_size = 8;
    CHECK_CODE(ttpu_runtime_fusion_stats(rt, &fs), TTPU_CODE_INVALID_ARGUMENT);
    fs.struct_size = sizeof fs;
    CHECK_OK(ttpu_runtime_fusion_stats(rt, &fs));
    CHECK(fs.recorded_ops >= 4 && fs.fused_programs >= 2);
    CHECK(fs.flushes[TTPU_FLUSH_REASON_EXPLICIT] >= 1 && fs.flushes[TTPU_FLUSH_REASON_HOST_READ] >= 1);
    CHECK(fs.memory_hits >= 1 && fs.misses >= 1 && fs.compiles >= 1);
    info.struct_size = 4;
    CHECK_CODE(ttpu_runtime_last_flush(rt, &info), TTPU_CODE_INVALID_ARGUMENT);

    /* Version 1 of an output struct is frozen: a struct_size that covers it
       exactly (through `source`, short of the trailing padding) is accepted,
       and nothing past it is written. */
    {
        union {
            ttpu_flush_info_t info;
            unsigned char bytes[sizeof(ttpu_flush_info_t) + 8];
        } u;
        const size_t v1 = offsetof(ttpu_flush_info_t, source) + sizeof(int32_t);
        memset(&u, 0xAB, sizeof u);
        u.info.struct_size = v1;
        CHECK_OK(ttpu_runtime_last_flush(rt, &u.info));
        CHECK(u.info.struct_size == v1 && u.info.source == 1);
        for (size_t i = v1; i < sizeof u.bytes; i++) CHECK(u.bytes[i] == 0xAB);
        u.info.struct_size = v1 - 1;
        CHECK_CODE_MSG(ttpu_runtime_last_flush(rt, &u.info), TTPU_CODE_INVALID_ARGUMENT, "smaller than version 1");
    }

    /* A different shape misses the cache; the miss is explained. */
    const float x2[2] = {1, 2};
    const int64_t s2[1] = {2};
    ttpu_tensor_t *tx2 = test_f32(rt, x2, s2, 1);
    y = record(rt, tx2);
    CHECK_OK(ttpu_runtime_flush(rt));
    size_t len = 0;
    CHECK_OK(ttpu_runtime_last_miss_explanation(rt, NULL, 0, &len));
    CHECK(len > 0);
    char buf[16];
    CHECK_OK(ttpu_runtime_last_miss_explanation(rt, buf, sizeof buf, &len));
    CHECK(strlen(buf) == (len < sizeof buf ? len : sizeof buf - 1));
    CHECK_CODE(ttpu_runtime_last_miss_explanation(rt, NULL, 8, &len), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_last_miss_explanation(rt, buf, sizeof buf, NULL), TTPU_CODE_INVALID_ARGUMENT);
    ttpu_tensor_destroy(y);

    /* Back to the process mode; NULL runtimes. */
    CHECK_OK(ttpu_thread_set_mode(-1));
    CHECK(ttpu_thread_effective_mode() == TTPU_MODE_DEFER_NEVER);
    CHECK_CODE(ttpu_runtime_flush(NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_fusion_stats(NULL, &fs), TTPU_CODE_INVALID_ARGUMENT);

    ttpu_tensor_destroy(tx2);
    ttpu_tensor_destroy(tx);
    ttpu_runtime_destroy(rt);
    printf("test_fusion: ok\n");
    return 0;
}
