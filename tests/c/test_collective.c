/* The collective area: all-reduce, all-gather, reduce-scatter, broadcast,
 * all-to-all and permute across the CPU plugin's 4 devices, an explicit
 * group, barrier, and bad arguments. Expected values are computed by hand. */
#include "check.h"

#define N 4

static ttpu_tensor_t *on_device(ttpu_runtime_t *rt, const float *data, int64_t n, int64_t device) {
    ttpu_tensor_t *t = NULL;
    CHECK_OK(ttpu_tensor_from_host(rt, data, (size_t)n * sizeof(float), TTPU_DTYPE_FLOAT32, &n, 1, device, &t));
    return t;
}

static ttpu_collective_t coll(int32_t kind) {
    ttpu_collective_t c = {sizeof(ttpu_collective_t), kind, TTPU_REDUCE_OP_SUM, 0, NULL, 0};
    return c;
}

static void destroy_all(ttpu_tensor_t **ts, size_t n) {
    for (size_t i = 0; i < n; i++) {
        ttpu_tensor_destroy(ts[i]);
        ts[i] = NULL;
    }
}

int main(void) {
    ttpu_runtime_options_t opts;
    memset(&opts, 0, sizeof opts);
    opts.struct_size = sizeof opts;
    opts.cpu_device_count = N;
    ttpu_runtime_t *rt = NULL;
    CHECK_OK(ttpu_runtime_create(&opts, &rt));

    /* Rank r holds {r, 10 + r}. */
    ttpu_tensor_t *in[N];
    for (int r = 0; r < N; r++) {
        const float v[2] = {(float)r, 10.0f + (float)r};
        in[r] = on_device(rt, v, 2, r);
    }
    const ttpu_tensor_t *const *cin = (const ttpu_tensor_t *const *)in;
    ttpu_tensor_t *out[N] = {NULL};

    ttpu_collective_t c = coll(TTPU_COLLECTIVE_KIND_ALL_REDUCE);
    CHECK_OK(ttpu_collective_run(rt, &c, cin, N, out));
    const float sum[2] = {6, 46};
    for (int r = 0; r < N; r++) CHECK_F32(rt, out[r], sum, 2);
    destroy_all(out, N);

    c.reduce_op = TTPU_REDUCE_OP_MAX;
    CHECK_OK(ttpu_collective_run(rt, &c, cin, N, out));
    const float max[2] = {3, 13};
    CHECK_F32(rt, out[2], max, 2);
    destroy_all(out, N);

    c = coll(TTPU_COLLECTIVE_KIND_ALL_GATHER);
    CHECK_OK(ttpu_collective_run(rt, &c, cin, N, out));
    CHECK(ttpu_tensor_ndim(out[1]) == 1 && ttpu_tensor_sizes(out[1])[0] == 2 * N);
    const float gathered[8] = {0, 10, 1, 11, 2, 12, 3, 13};
    CHECK_F32(rt, out[1], gathered, 8);
    destroy_all(out, N);

    /* reduce_scatter of the gathered 8 values on every rank: rank r gets 4 * elements 2r, 2r+1. */
    ttpu_tensor_t *big[N];
    for (int r = 0; r < N; r++) big[r] = on_device(rt, gathered, 8, r);
    c = coll(TTPU_COLLECTIVE_KIND_REDUCE_SCATTER);
    CHECK_OK(ttpu_collective_run(rt, &c, (const ttpu_tensor_t *const *)big, N, out));
    const float scattered[2] = {4 * 1, 4 * 11};
    CHECK_F32(rt, out[1], scattered, 2);
    destroy_all(out, N);

    /* all_to_all: rank j gets element j of every rank's 4 values. */
    ttpu_tensor_t *quad[N];
    for (int r = 0; r < N; r++) {
        const float v[4] = {(float)(10 * r), (float)(10 * r + 1), (float)(10 * r + 2), (float)(10 * r + 3)};
        quad[r] = on_device(rt, v, 4, r);
    }
    c = coll(TTPU_COLLECTIVE_KIND_ALL_TO_ALL);
    CHECK_OK(ttpu_collective_run(rt, &c, (const ttpu_tensor_t *const *)quad, N, out));
    const float col2[4] = {2, 12, 22, 32};
    CHECK_F32(rt, out[2], col2, 4);
    destroy_all(out, N);

    c = coll(TTPU_COLLECTIVE_KIND_BROADCAST);
    c.root = 3;
    CHECK_OK(ttpu_collective_run(rt, &c, cin, N, out));
    const float from3[2] = {3, 13};
    CHECK_F32(rt, out[0], from3, 2);
    destroy_all(out, N);

    /* send/recv: rank 0 -> rank 2; the others receive zeros. */
    const int64_t pairs[2] = {0, 2};
    c = coll(TTPU_COLLECTIVE_KIND_PERMUTE);
    c.pairs = pairs;
    c.num_pairs = 1;
    CHECK_OK(ttpu_collective_run(rt, &c, cin, N, out));
    const float from0[2] = {0, 10}, zeros[2] = {0, 0};
    CHECK_F32(rt, out[2], from0, 2);
    CHECK_F32(rt, out[1], zeros, 2);
    destroy_all(out, N);

    /* An explicit group of the global ids of devices 3 and 1 (rank 0 is device 3). */
    const ttpu_device_t *d3 = NULL, *d1 = NULL;
    CHECK_OK(ttpu_runtime_device(rt, 3, &d3));
    CHECK_OK(ttpu_runtime_device(rt, 1, &d1));
    const int64_t group[2] = {ttpu_device_id(d3), ttpu_device_id(d1)};
    const ttpu_tensor_t *pair_in[2] = {in[3], in[1]};
    c = coll(TTPU_COLLECTIVE_KIND_ALL_GATHER);
    CHECK_OK(ttpu_collective_run_in_group(rt, &c, group, 2, pair_in, 2, out));
    const float g31[4] = {3, 13, 1, 11};
    CHECK_F32(rt, out[1], g31, 4);
    destroy_all(out, 2);

    const int64_t devices[N] = {0, 1, 2, 3};
    CHECK_OK(ttpu_collective_barrier(rt, devices, N));

    /* Bad arguments: named errors, nothing written, the runtime keeps working. */
    c = coll(42);
    CHECK_CODE_MSG(ttpu_collective_run(rt, &c, cin, N, out), TTPU_CODE_INVALID_ARGUMENT, "unknown collective kind 42");
    c = coll(TTPU_COLLECTIVE_KIND_ALL_REDUCE);
    c.struct_size = 4;
    CHECK_CODE_MSG(ttpu_collective_run(rt, &c, cin, N, out), TTPU_CODE_INVALID_ARGUMENT, "struct_size");
    CHECK_CODE(ttpu_collective_run(rt, NULL, cin, N, out), TTPU_CODE_INVALID_ARGUMENT);
    c = coll(TTPU_COLLECTIVE_KIND_ALL_REDUCE);
    const ttpu_tensor_t *mixed[2] = {in[0], quad[1]};
    CHECK_CODE_MSG(ttpu_collective_run(rt, &c, mixed, 2, out), TTPU_CODE_INVALID_ARGUMENT, "rank 1 (tpu:1) has float32[4]");
    const ttpu_tensor_t *same[2] = {in[0], in[0]};
    CHECK_CODE_MSG(ttpu_collective_run(rt, &c, same, 2, out), TTPU_CODE_INVALID_ARGUMENT, "same device");
    CHECK_CODE(ttpu_collective_run(rt, &c, cin, N, NULL), TTPU_CODE_INVALID_ARGUMENT);
    const int64_t bad_devices[2] = {0, 7};
    CHECK_CODE(ttpu_collective_barrier(rt, bad_devices, 2), TTPU_CODE_OUT_OF_RANGE);
    CHECK(out[0] == NULL);
    CHECK_OK(ttpu_collective_run(rt, &c, cin, N, out));
    CHECK_F32(rt, out[3], sum, 2);
    destroy_all(out, N);

    destroy_all(in, N);
    destroy_all(big, N);
    destroy_all(quad, N);
    /* Ownership across runtimes: another runtime's tensor is refused, naming
       both runtimes, before anything runs; a collective mixing the two
       leaves no replica waiting, so both runtimes synchronize and are
       destroyed promptly afterwards. */
    {
        ttpu_runtime_t *other = NULL;
        CHECK_OK(ttpu_runtime_create(&opts, &other));
        const float v[2] = {1, 2};
        ttpu_tensor_t *mine = on_device(rt, v, 2, 0);
        ttpu_tensor_t *theirs = on_device(other, v, 2, 1);
        ttpu_value_t args[2] = {test_tensor_arg(mine), test_tensor_arg(theirs)};
        ttpu_value_t res[1];
        memset(res, 0, sizeof res);
        size_t count = 0;
        CHECK_CODE_MSG(ttpu_op_call(rt, "aten::add.Tensor", args, 2, res, 1, &count), TTPU_CODE_INVALID_ARGUMENT,
                       "argument 'other': the tensor belongs to runtime #");
        CHECK(res[0].ptr == NULL);
        float host[2];
        CHECK_CODE_MSG(ttpu_tensor_to_host(rt, theirs, host, sizeof host), TTPU_CODE_INVALID_ARGUMENT,
                       "tensors cannot be shared across runtimes");
        const ttpu_tensor_t *mixed[2] = {mine, theirs};
        ttpu_collective_t ar = coll(TTPU_COLLECTIVE_KIND_ALL_REDUCE);
        ttpu_tensor_t *mixed_out[2] = {NULL, NULL};
        CHECK_CODE_MSG(ttpu_collective_run(rt, &ar, mixed, 2, mixed_out), TTPU_CODE_INVALID_ARGUMENT, "input 1");
        CHECK(mixed_out[0] == NULL && mixed_out[1] == NULL);
        CHECK_OK(ttpu_runtime_synchronize(rt));
        CHECK_OK(ttpu_runtime_synchronize(other));
        /* Each runtime still works with its own tensors. */
        ttpu_value_t own[2] = {test_tensor_arg(theirs), test_tensor_arg(theirs)};
        CHECK_OK(ttpu_op_call(other, "aten::add.Tensor", own, 2, res, 1, &count));
        const float twice[2] = {2, 4};
        ttpu_tensor_t *sum2 = (ttpu_tensor_t *)res[0].ptr;
        CHECK(count == 1 && sum2 != NULL);
        CHECK_F32(other, sum2, twice, 2);
        ttpu_tensor_destroy(sum2);
        ttpu_tensor_destroy(mine);
        ttpu_tensor_destroy(theirs);
        ttpu_runtime_destroy(other);
    }

    ttpu_runtime_destroy(rt);
    return 0;
}
