/* The lean op call (API 1.5): ops by id, tensor arguments as a storage plus
 * a geometry (no handle per view), results with their geometry in one
 * struct, an in-place result reported as the argument it is. Expected values
 * are worked out by hand. */
#include "check.h"

#include <stdint.h>

static ttpu_value_t view_arg(const ttpu_view_t *v) {
    ttpu_value_t a = {TTPU_VALUE_KIND_VIEW, 0, 0.0, v, 0};
    return a;
}

static void check_f32(ttpu_runtime_t *rt, const ttpu_tensor_t *t, const float *want, size_t n) {
    float got[16];
    CHECK(n <= 16);
    CHECK_OK(ttpu_tensor_to_host(rt, t, got, n * sizeof(float)));
    for (size_t i = 0; i < n; i++) CHECK(got[i] == want[i]);
}

static void add_views(ttpu_runtime_t *rt, size_t add) {
    /* One storage x = 0..5 seen as a [2,3] matrix and as its last row. */
    const float xv[6] = {0, 1, 2, 3, 4, 5};
    const int64_t s6[1] = {6};
    ttpu_tensor_t *x = test_f32(rt, xv, s6, 1);
    const int64_t msz[2] = {2, 3}, mst[2] = {3, 1}, rsz[1] = {3}, rst[1] = {1};
    ttpu_view_t m = {x, msz, mst, 2, 0}, row = {x, rsz, rst, 1, 3};
    ttpu_value_t args[3] = {view_arg(&m), view_arg(&row), {TTPU_VALUE_KIND_SCALAR_INT, 1, 0.0, NULL, 0}};
    ttpu_result_t res[2];
    size_t n = 0;
    CHECK_OK(ttpu_op_call_id(rt, add, args, 3, res, sizeof res[0], 2, &n));
    CHECK(n == 1 && res[0].tensor != NULL && res[0].arg == -1);
    CHECK(res[0].dtype == TTPU_DTYPE_FLOAT32 && res[0].device == 0 && res[0].offset == 0);
    CHECK(res[0].ndim == 2 && res[0].sizes[0] == 2 && res[0].sizes[1] == 3);
    CHECK(res[0].strides[0] == 3 && res[0].strides[1] == 1 && res[0].storage_numel == 6);
    const float want[6] = {3, 5, 7, 6, 8, 10};
    check_f32(rt, res[0].tensor, want, 6);
    ttpu_tensor_destroy(res[0].tensor);
    ttpu_tensor_destroy(x);
}

int main(void) {
    ttpu_runtime_t *rt = test_runtime();
    size_t add = 0, add_ = 0, cat = 0, index = 0;
    CHECK_OK(ttpu_op_lookup("aten::add.Tensor", &add));
    CHECK_OK(ttpu_op_lookup("aten::add_.Tensor", &add_));
    CHECK_OK(ttpu_op_lookup("aten::cat", &cat));
    CHECK_OK(ttpu_op_lookup("aten::index.Tensor", &index));
    CHECK(add != add_);
    CHECK_CODE_MSG(ttpu_op_lookup("aten::nope", &add_), TTPU_CODE_NOT_FOUND, "aten::nope");
    CHECK_OK(ttpu_op_lookup("aten::add_.Tensor", &add_));

    add_views(rt, add);
    CHECK_OK(ttpu_process_set_mode(TTPU_MODE_DEFER_AND_FUSE));
    add_views(rt, add);
    CHECK_OK(ttpu_process_set_mode(TTPU_MODE_DEFER_NEVER));

    /* A caller built against a later, larger ttpu_result_t: the runtime
     * writes each result's known fields at the caller's stride and leaves
     * the rest alone. */
    {
        const float v[3] = {1, 2, 3};
        const int64_t s3[1] = {3}, st1[1] = {1};
        ttpu_tensor_t *t = test_f32(rt, v, s3, 1);
        ttpu_view_t tv = {t, s3, st1, 1, 0};
        ttpu_value_t targs[3] = {view_arg(&tv), view_arg(&tv), {TTPU_VALUE_KIND_SCALAR_INT, 1, 0.0, NULL, 0}};
        struct {
            ttpu_result_t r;
            int64_t later[2];
        } big[2];
        memset(big, 0x5a, sizeof big);
        size_t n = 0;
        CHECK_OK(ttpu_op_call_id(rt, add, targs, 3, &big[0].r, sizeof big[0], 2, &n));
        CHECK(n == 1 && big[0].r.tensor != NULL && big[0].r.ndim == 1 && big[0].r.sizes[0] == 3);
        CHECK(big[0].later[0] == 0x5a5a5a5a5a5a5a5a && big[0].later[1] == 0x5a5a5a5a5a5a5a5a);
        const float doubled[3] = {2, 4, 6};
        check_f32(rt, big[0].r.tensor, doubled, 3);
        ttpu_tensor_destroy(big[0].r.tensor);
        ttpu_tensor_destroy(t);
    }

    /* In place through views: x[0:3] += x[3:6]; the result is argument 0. */
    const float xv[6] = {0, 1, 2, 3, 4, 5};
    const int64_t s6[1] = {6};
    ttpu_tensor_t *x = test_f32(rt, xv, s6, 1);
    const int64_t s3[1] = {3}, st1[1] = {1};
    ttpu_view_t lo = {x, s3, st1, 1, 0}, hi = {x, s3, st1, 1, 3};
    ttpu_value_t iargs[2] = {view_arg(&lo), view_arg(&hi)};
    ttpu_result_t res[4];
    size_t n = 0;
    CHECK_OK(ttpu_op_call_id(rt, add_, iargs, 2, res, sizeof res[0], 4, &n));
    CHECK(n == 1 && res[0].tensor == NULL && res[0].arg == 0 && res[0].sizes == NULL && res[0].ndim == 1);
    const float after[6] = {3, 5, 7, 3, 4, 5};
    check_f32(rt, x, after, 6);

    /* A view list: cat([x[3:6], x[0:3]]). */
    ttpu_view_t both[2] = {hi, lo};
    ttpu_value_t cargs[1] = {{TTPU_VALUE_KIND_VIEW_LIST, 0, 0.0, both, 2}};
    CHECK_OK(ttpu_op_call_id(rt, cat, cargs, 1, res, sizeof res[0], 4, &n));
    CHECK(n == 1 && res[0].tensor != NULL && res[0].sizes[0] == 6);
    const float catted[6] = {3, 4, 5, 3, 5, 7};
    check_f32(rt, res[0].tensor, catted, 6);
    ttpu_tensor_destroy(res[0].tensor);

    /* A view list with a None entry (Tensor?[]): x as [2,3], then [:, [2, 0]]. */
    const int64_t iv[2] = {2, 0};
    const int64_t s2[1] = {2};
    ttpu_tensor_t *idx = NULL;
    CHECK_OK(ttpu_tensor_from_host(rt, iv, sizeof iv, TTPU_DTYPE_INT64, s2, 1, 0, &idx));
    const int64_t msz[2] = {2, 3}, mst[2] = {3, 1};
    ttpu_view_t m = {x, msz, mst, 2, 0};
    ttpu_view_t idxs[2] = {{NULL, NULL, NULL, 0, 0}, {idx, s2, st1, 1, 0}};
    ttpu_value_t xargs[2] = {view_arg(&m), {TTPU_VALUE_KIND_VIEW_LIST, 0, 0.0, idxs, 2}};
    CHECK_OK(ttpu_op_call_id(rt, index, xargs, 2, res, sizeof res[0], 4, &n));
    CHECK(n == 1 && res[0].ndim == 2 && res[0].sizes[0] == 2 && res[0].sizes[1] == 2);
    const float picked[4] = {7, 3, 5, 3};
    check_f32(rt, res[0].tensor, picked, 4);
    ttpu_tensor_destroy(res[0].tensor);

    /* Hostile input: an overflowing stride, an op id past the end, no room
     * for the result, a NULL view where a tensor is required. Nothing runs. */
    const int64_t huge[1] = {INT64_MAX / 2};
    ttpu_view_t bad = {x, s3, huge, 1, 0};
    ttpu_value_t bargs[2] = {view_arg(&bad), view_arg(&hi)};
    CHECK_CODE(ttpu_op_call_id(rt, add_, bargs, 2, res, sizeof res[0], 4, &n), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_op_call_id(rt, (size_t)1 << 40, iargs, 2, res, sizeof res[0], 4, &n), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_op_call_id(rt, add_, iargs, 2, res, sizeof res[0], 0, &n), TTPU_CODE_RESOURCE_EXHAUSTED);
    CHECK_CODE_MSG(ttpu_op_call_id(rt, add_, iargs, 2, res, 8, 4, &n), TTPU_CODE_INVALID_ARGUMENT, "result_size");
    ttpu_value_t nargs[2] = {view_arg(NULL), view_arg(&hi)};
    CHECK_CODE_MSG(ttpu_op_call_id(rt, add, nargs, 2, res, sizeof res[0], 4, &n), TTPU_CODE_INVALID_ARGUMENT, "'self'");
    check_f32(rt, x, after, 6);

    ttpu_tensor_destroy(idx);
    ttpu_tensor_destroy(x);
    ttpu_runtime_destroy(rt);
    return 0;
}
