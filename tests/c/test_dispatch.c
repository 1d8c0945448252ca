/* The calling convention's host-assisted steps, as a C caller gets them from
 * core (the same ones PyTorch gets): nonzero, masked_select, boolean-mask
 * indexing (read and write), native_batch_norm's translation, and a mask of
 * the wrong shape. Expected values are worked out by hand. */
#include "check.h"

#include <string.h>

static ttpu_tensor_t *bools(ttpu_runtime_t *rt, const bool *data, const int64_t *sizes, size_t ndim, size_t n) {
    ttpu_tensor_t *t = NULL;
    CHECK_OK(ttpu_tensor_from_host(rt, data, n, TTPU_DTYPE_BOOL, sizes, ndim, 0, &t));
    return t;
}

static ttpu_tensor_t *call1(ttpu_runtime_t *rt, const char *op, const ttpu_value_t *args, size_t nargs) {
    ttpu_value_t out[1];
    size_t n = 0;
    CHECK_OK(ttpu_op_call(rt, op, args, nargs, out, 1, &n));
    CHECK(n == 1 && out[0].kind == TTPU_VALUE_KIND_TENSOR);
    return (ttpu_tensor_t *)out[0].ptr;
}

static void check_shape(const ttpu_tensor_t *t, const int64_t *want, size_t ndim) {
    CHECK(ttpu_tensor_ndim(t) == ndim);
    CHECK(memcmp(ttpu_tensor_sizes(t), want, ndim * sizeof(int64_t)) == 0);
}

int main(void) {
    ttpu_runtime_t *rt = test_runtime();
    const float xv[6] = {0, 1, 0, 2, 3, 0};
    const int64_t s23[2] = {2, 3};
    ttpu_tensor_t *x = test_f32(rt, xv, s23, 2);

    /* nonzero: [[0,1],[1,0],[1,1]] (row-major order of the nonzeros). */
    ttpu_value_t a1[1] = {test_tensor_arg(x)};
    ttpu_tensor_t *nz = call1(rt, "aten::nonzero", a1, 1);
    const int64_t s32[2] = {3, 2};
    check_shape(nz, s32, 2);
    int64_t nzv[6];
    CHECK_OK(ttpu_tensor_to_host(rt, nz, nzv, sizeof nzv));
    const int64_t nz_want[6] = {0, 1, 1, 0, 1, 1};
    CHECK(memcmp(nzv, nz_want, sizeof nzv) == 0);

    /* masked_select with a broadcast mask (one row for both rows). */
    const bool mrow[3] = {true, false, true};
    const int64_t s3[1] = {3};
    ttpu_tensor_t *m = bools(rt, mrow, s3, 1, 3);
    ttpu_value_t a2[2] = {test_tensor_arg(x), test_tensor_arg(m)};
    ttpu_tensor_t *sel = call1(rt, "aten::masked_select", a2, 2);
    const int64_t s4[1] = {4};
    check_shape(sel, s4, 1);
    const float sel_want[4] = {0, 0, 2, 0};
    CHECK_F32(rt, sel, sel_want, 4);
    /* A float mask is refused, naming the op. */
    ttpu_value_t a2f[2] = {test_tensor_arg(x), test_tensor_arg(x)};
    ttpu_value_t out[1];
    size_t n = 0;
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::masked_select", a2f, 2, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT,
                   "aten::masked_select");

    /* x[mask] with a full 2-D mask: the elements > 0. */
    const bool mfull[6] = {false, true, false, true, true, false};
    ttpu_tensor_t *mf = bools(rt, mfull, s23, 2, 6);
    const ttpu_tensor_t *idx[1] = {mf};
    ttpu_value_t list = {TTPU_VALUE_KIND_TENSOR_LIST, 0, 0.0, idx, 1};
    ttpu_value_t a3[2] = {test_tensor_arg(x), list};
    ttpu_tensor_t *picked = call1(rt, "aten::index.Tensor", a3, 2);
    const float picked_want[3] = {1, 2, 3};
    check_shape(picked, (const int64_t[]){3}, 1);
    CHECK_F32(rt, picked, picked_want, 3);

    /* x[:, mask] = 7 through index_put_ (a None index, then the row mask). */
    const ttpu_tensor_t *idx2[2] = {NULL, m};
    ttpu_value_t list2 = {TTPU_VALUE_KIND_TENSOR_LIST, 0, 0.0, idx2, 2};
    const float seven = 7;
    ttpu_tensor_t *v = NULL;
    CHECK_OK(ttpu_tensor_from_host(rt, &seven, sizeof seven, TTPU_DTYPE_FLOAT32, NULL, 0, 0, &v));
    ttpu_value_t a4[4] = {test_tensor_arg(x), list2, test_tensor_arg(v), {TTPU_VALUE_KIND_BOOL, 0, 0.0, NULL, 0}};
    ttpu_tensor_t *same = call1(rt, "aten::index_put_", a4, 4);
    const float put_want[6] = {7, 1, 7, 7, 3, 7};
    CHECK_F32(rt, x, put_want, 6);
    ttpu_tensor_destroy(same);

    /* A mask whose shape does not match the indexed dimensions. */
    const bool m2[2] = {true, false};
    const int64_t s2[1] = {2};
    ttpu_tensor_t *bad = bools(rt, m2, s2, 1, 2);
    const ttpu_tensor_t *idx3[2] = {NULL, bad};
    ttpu_value_t list3 = {TTPU_VALUE_KIND_TENSOR_LIST, 0, 0.0, idx3, 2};
    ttpu_value_t a5[2] = {test_tensor_arg(x), list3};
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::index.Tensor", a5, 2, out, 1, &n), TTPU_CODE_OUT_OF_RANGE,
                   "does not match the shape of the indexed tensor");

    /* native_batch_norm in evaluation mode: (x - mean) / sqrt(var + eps) * w + b
     * per channel, for x of shape [2, 2] (batch 2, 2 channels). */
    const float bx[4] = {1, 2, 3, 4}, mean[2] = {1, 2}, var[2] = {4, 16}, w[2] = {2, 1}, b[2] = {0, 1};
    const int64_t s22[2] = {2, 2}, s2c[1] = {2};
    ttpu_tensor_t *tx = test_f32(rt, bx, s22, 2), *tm = test_f32(rt, mean, s2c, 1), *tv = test_f32(rt, var, s2c, 1);
    ttpu_tensor_t *tw = test_f32(rt, w, s2c, 1), *tb = test_f32(rt, b, s2c, 1);
    ttpu_value_t a6[8] = {test_tensor_arg(tx), test_tensor_arg(tw), test_tensor_arg(tb), test_tensor_arg(tm),
                          test_tensor_arg(tv), {TTPU_VALUE_KIND_BOOL, 0, 0.0, NULL, 0},
                          {TTPU_VALUE_KIND_DOUBLE, 0, 0.1, NULL, 0}, {TTPU_VALUE_KIND_DOUBLE, 0, 0.0, NULL, 0}};
    ttpu_value_t bn[3];
    CHECK_OK(ttpu_op_call(rt, "aten::native_batch_norm", a6, 8, bn, 3, &n));
    CHECK(n == 3);
    /* channel 0: (1-1)/2*2+0 = 0, (3-1)/2*2 = 2; channel 1: (2-2)/4+1 = 1, (4-2)/4+1 = 1.5 */
    const float bn_want[4] = {0, 1, 2, 1.5f};
    CHECK_F32(rt, (ttpu_tensor_t *)bn[0].ptr, bn_want, 4);
    for (size_t i = 0; i < n; i++) ttpu_tensor_destroy((ttpu_tensor_t *)bn[i].ptr);

    ttpu_tensor_t *ts[] = {x, nz, m, sel, mf, picked, v, bad, tx, tm, tv, tw, tb};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ttpu_tensor_destroy(ts[i]);
    ttpu_runtime_destroy(rt);
    puts("test_dispatch: ok");
    return 0;
}
