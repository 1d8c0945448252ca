/* The op area: generic calls with hand-computed results, bad op names and
 * arguments, result capacity, Tensor[] results, optional tensors, listing. */
#include "check.h"

static ttpu_value_t int_arg(int64_t i) {
    ttpu_value_t v = {TTPU_VALUE_KIND_INT, i, 0.0, NULL, 0};
    return v;
}

int main(void) {
    ttpu_runtime_t *rt = test_runtime();
    const int64_t s22[2] = {2, 2}, s23[2] = {2, 3}, s32[2] = {3, 2}, s3[1] = {3};
    const float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
    ttpu_tensor_t *ta = test_f32(rt, a, s22, 2), *tb = test_f32(rt, b, s22, 2);
    ttpu_value_t out[4];
    size_t n = 0;

    /* add.Tensor with alpha: a + 2*b. */
    ttpu_value_t add[3] = {test_tensor_arg(ta), test_tensor_arg(tb), {TTPU_VALUE_KIND_SCALAR_INT, 2, 0.0, NULL, 0}};
    CHECK_OK(ttpu_op_call(rt, "aten::add.Tensor", add, 3, out, 4, &n));
    CHECK(n == 1 && out[0].kind == TTPU_VALUE_KIND_TENSOR);
    const float want_add[4] = {21, 42, 63, 84};
    /* The owned handle, taken out typed: the value no longer owns it. */
    ttpu_tensor_t *sum = ttpu_value_take_tensor(&out[0]);
    CHECK(sum != NULL && out[0].kind == TTPU_VALUE_KIND_NONE && out[0].ptr == NULL);
    CHECK(ttpu_value_take_tensor(&out[0]) == NULL);
    CHECK_F32(rt, sum, want_add, 4);
    ttpu_tensor_destroy(sum);
    /* Nothing to take: NULL, a non-tensor value, a destroyed handle. */
    CHECK(ttpu_value_take_tensor(NULL) == NULL);
    ttpu_value_t not_tensor = {TTPU_VALUE_KIND_INT, 3, 0.0, NULL, 0};
    CHECK(ttpu_value_take_tensor(&not_tensor) == NULL && not_tensor.kind == TTPU_VALUE_KIND_INT);
    ttpu_value_t dead = test_tensor_arg(sum);
    CHECK(ttpu_value_take_tensor(&dead) == NULL && dead.kind == TTPU_VALUE_KIND_TENSOR);

    /* matmul: [[1,2],[3,4]] @ [[10,20],[30,40]] = [[70,100],[150,220]]. */
    ttpu_value_t mm[2] = {test_tensor_arg(ta), test_tensor_arg(tb)};
    CHECK_OK(ttpu_op_call(rt, "aten::matmul", mm, 2, out, 1, &n));
    const float want_mm[4] = {70, 100, 150, 220};
    CHECK_F32(rt, (const ttpu_tensor_t *)out[0].ptr, want_mm, 4);
    ttpu_tensor_destroy((ttpu_tensor_t *)out[0].ptr);

    /* linear: x[2,3] @ w[2,3]^T + bias[2]; then with bias None (NULL optional). */
    const float x[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, -1, 2, 1, 0}, bias[2] = {0.5f, -1};
    const int64_t s2[1] = {2};
    ttpu_tensor_t *tx = test_f32(rt, x, s23, 2), *tw = test_f32(rt, w, s23, 2), *tbias = test_f32(rt, bias, s2, 1);
    ttpu_value_t lin[3] = {test_tensor_arg(tx), test_tensor_arg(tw), {TTPU_VALUE_KIND_OPTIONAL_TENSOR, 0, 0.0, tbias, 0}};
    CHECK_OK(ttpu_op_call(rt, "aten::linear", lin, 3, out, 1, &n));
    const float want_lin[4] = {-1.5f, 3, -1.5f, 12};
    CHECK_F32(rt, (const ttpu_tensor_t *)out[0].ptr, want_lin, 4);
    ttpu_tensor_destroy((ttpu_tensor_t *)out[0].ptr);
    lin[2].ptr = NULL;
    CHECK_OK(ttpu_op_call(rt, "aten::linear", lin, 3, out, 1, &n));
    const float want_lin0[4] = {-2, 4, -2, 13};
    CHECK_F32(rt, (const ttpu_tensor_t *)out[0].ptr, want_lin0, 4);
    ttpu_tensor_destroy((ttpu_tensor_t *)out[0].ptr);

    /* Tensor[] results: split a [3,2] tensor into sizes 2 and 1 along dim 0. */
    const float y[6] = {1, 2, 3, 4, 5, 6};
    ttpu_tensor_t *ty = test_f32(rt, y, s32, 2);
    ttpu_value_t sp[3] = {test_tensor_arg(ty), int_arg(2), int_arg(0)};
    CHECK_OK(ttpu_op_call(rt, "aten::split.Tensor", sp, 3, out, 4, &n));
    CHECK(n == 2);
    CHECK(ttpu_tensor_sizes((const ttpu_tensor_t *)out[0].ptr)[0] == 2);
    CHECK(ttpu_tensor_sizes((const ttpu_tensor_t *)out[1].ptr)[0] == 1);
    CHECK(ttpu_tensor_same_storage((const ttpu_tensor_t *)out[0].ptr, ty));
    const float want_s1[2] = {5, 6};
    CHECK_F32(rt, (const ttpu_tensor_t *)out[1].ptr, want_s1, 2);
    ttpu_tensor_destroy((ttpu_tensor_t *)out[0].ptr);
    ttpu_tensor_destroy((ttpu_tensor_t *)out[1].ptr);
    /* Capacity too small: RESOURCE_EXHAUSTED, nothing written (no leak). */
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::split.Tensor", sp, 3, out, 1, &n), TTPU_CODE_RESOURCE_EXHAUSTED,
                   "returns 2 values");
    CHECK_CODE(ttpu_op_call(rt, "aten::matmul", mm, 2, out, 0, &n), TTPU_CODE_RESOURCE_EXHAUSTED);
    CHECK_CODE(ttpu_op_call(rt, "aten::matmul", mm, 2, NULL, 1, &n), TTPU_CODE_INVALID_ARGUMENT);

    /* Unknown op names: NOT_FOUND. */
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::silly_op", NULL, 0, out, 1, &n), TTPU_CODE_NOT_FOUND, "aten::silly_op");
    CHECK_CODE(ttpu_op_call(rt, "", NULL, 0, out, 1, &n), TTPU_CODE_NOT_FOUND);
    CHECK(!ttpu_op_exists("aten::silly_op") && ttpu_op_exists("aten::matmul") && !ttpu_op_exists(NULL));
    CHECK_CODE(ttpu_op_call(rt, NULL, NULL, 0, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT);
    const char not_utf8[3] = {(char)0xff, (char)0xfe, 0};
    CHECK_CODE(ttpu_op_call(rt, not_utf8, NULL, 0, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT);

    /* Wrongly typed / malformed arguments: INVALID_ARGUMENT. */
    ttpu_value_t bad[2] = {test_tensor_arg(ta), {TTPU_VALUE_KIND_STRING, 0, 0.0, "two", 3}};
    CHECK_CODE(ttpu_op_call(rt, "aten::add.Tensor", bad, 2, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT);
    bad[1] = int_arg(3);
    CHECK_CODE(ttpu_op_call(rt, "aten::matmul", bad, 2, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT);
    bad[1].kind = 99;
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::add.Tensor", bad, 2, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT,
                   "unknown value kind 99");
    bad[1].kind = TTPU_VALUE_KIND_TENSOR;
    bad[1].ptr = NULL;
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::add.Tensor", bad, 2, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT,
                   "ttpu_tensor_t is NULL");
    bad[1].kind = TTPU_VALUE_KIND_INT_LIST;
    bad[1].len = 5;
    CHECK_CODE(ttpu_op_call(rt, "aten::add.Tensor", bad, 2, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_op_call(rt, "aten::add.Tensor", NULL, 2, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_op_call(rt, "aten::mul.Tensor", mm, 1, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT);
    /* Mismatched shapes. */
    ttpu_tensor_t *t3 = test_f32(rt, a, s3, 1);
    ttpu_value_t mis[2] = {test_tensor_arg(ta), test_tensor_arg(t3)};
    CHECK_CODE(ttpu_op_call(rt, "aten::mul.Tensor", mis, 2, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_op_call(rt, "aten::matmul", mm, 2, out, 1, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_op_call(NULL, "aten::matmul", mm, 2, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT);

    /* Results over the 1 TiB cap on one tensor, and negative sizes, are
     * rejected before anything is allocated. */
    const int64_t huge[1] = {(int64_t)1 << 40}, huge2[2] = {(int64_t)1 << 32, (int64_t)1 << 32}, negs[2] = {2, -1};
    ttpu_value_t full[2] = {{TTPU_VALUE_KIND_INT_LIST, 0, 0.0, huge, 1}, {TTPU_VALUE_KIND_SCALAR_DOUBLE, 0, 1.0, NULL, 0}};
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::full", full, 2, out, 1, &n), TTPU_CODE_RESOURCE_EXHAUSTED, "aten::full");
    full[0].ptr = huge2;
    full[0].len = 2;
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::full", full, 2, out, 1, &n), TTPU_CODE_RESOURCE_EXHAUSTED, "1 TiB");
    full[0].ptr = negs;
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::full", full, 2, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT, "negative");
    ttpu_tensor_t *none = NULL;
    CHECK_CODE(ttpu_tensor_from_host(rt, NULL, 0, TTPU_DTYPE_FLOAT32, huge2, 2, 0, &none), TTPU_CODE_RESOURCE_EXHAUSTED);
    CHECK(none == NULL);

    /* Listing. */
    size_t count = ttpu_op_count();
    CHECK(count > 100);
    const char *name = NULL;
    CHECK_OK(ttpu_op_name(0, &name));
    CHECK(name != NULL && strncmp(name, "aten::", 6) == 0 && ttpu_op_exists(name));
    CHECK_CODE(ttpu_op_name(count, &name), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_op_name(0, NULL), TTPU_CODE_INVALID_ARGUMENT);

    /* An op's schema, by id: the aten declaration. */
    size_t add_id = 0;
    const char *decl = NULL;
    CHECK_OK(ttpu_op_lookup("aten::add.Tensor", &add_id));
    CHECK_OK(ttpu_op_schema(add_id, &decl));
    CHECK(strcmp(decl, "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor") == 0);
    CHECK_OK(ttpu_op_lookup("aten::add.out", &add_id)); /* derived by name */
    CHECK_OK(ttpu_op_schema(add_id, &decl));
    CHECK(strstr(decl, "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(") == decl);
    CHECK_CODE(ttpu_op_schema(ttpu_op_count() + 100, &decl), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_op_schema(0, NULL), TTPU_CODE_INVALID_ARGUMENT);

    /* A float[] argument (DOUBLE_LIST, API 1.8): histogram's range. Edges
     * 0, 1, 2; 0 and 0.5 in the first bin, 1, 1.5 and 2 (the right edge)
     * in the second, 5 outside. */
    const float hx[6] = {0, 0.5f, 1, 1.5f, 2, 5};
    const int64_t s6[1] = {6};
    const double range[2] = {0.0, 2.0};
    ttpu_tensor_t *th = test_f32(rt, hx, s6, 1);
    ttpu_value_t hist[3] = {test_tensor_arg(th), int_arg(2), {TTPU_VALUE_KIND_DOUBLE_LIST, 0, 0.0, range, 2}};
    CHECK_OK(ttpu_op_call(rt, "aten::histogram.bin_ct", hist, 3, out, 2, &n));
    CHECK(n == 2);
    const float want_hist[2] = {2, 3}, want_edges[3] = {0, 1, 2};
    CHECK_F32(rt, (const ttpu_tensor_t *)out[0].ptr, want_hist, 2);
    CHECK_F32(rt, (const ttpu_tensor_t *)out[1].ptr, want_edges, 3);
    ttpu_tensor_destroy((ttpu_tensor_t *)out[0].ptr);
    ttpu_tensor_destroy((ttpu_tensor_t *)out[1].ptr);
    /* NULL data with a nonzero length is refused. */
    hist[2].ptr = NULL;
    CHECK_CODE(ttpu_op_call(rt, "aten::histogram.bin_ct", hist, 3, out, 2, &n), TTPU_CODE_INVALID_ARGUMENT);
    ttpu_tensor_destroy(th);

    /* Still usable after all the errors. */
    CHECK_OK(ttpu_runtime_synchronize(rt));

    ttpu_tensor_destroy(t3);
    ttpu_tensor_destroy(ty);
    ttpu_tensor_destroy(tx);
    ttpu_tensor_destroy(tw);
    ttpu_tensor_destroy(tbias);
    ttpu_tensor_destroy(ta);
    ttpu_tensor_destroy(tb);
    ttpu_runtime_destroy(rt);
    printf("test_op: ok\n");
    return 0;
}
