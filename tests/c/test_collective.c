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
    ttpu_runtime_destroy(rt);
    return 0;
}
