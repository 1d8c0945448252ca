/* The tensor area: host round trips per dtype, metadata, bad sizes, NULL
 * and destroyed handles, retain. */
#include "check.h"

static ttpu_tensor_t *from_host(ttpu_runtime_t *rt, const void *data, size_t nbytes, int32_t dtype,
                                const int64_t *sizes, size_t ndim) {
    ttpu_tensor_t *t = NULL;
    CHECK_OK(ttpu_tensor_from_host(rt, data, nbytes, dtype, sizes, ndim, 0, &t));
    CHECK(t != NULL);
    CHECK(ttpu_tensor_dtype(t) == dtype);
    CHECK(ttpu_tensor_ndim(t) == ndim);
    for (size_t i = 0; i < ndim; i++) CHECK(ttpu_tensor_sizes(t)[i] == sizes[i]);
    return t;
}

int main(void) {
    ttpu_runtime_t *rt = test_runtime();

    /* float32, 2x3: metadata and round trip. */
    const float f[6] = {1.5f, -2.0f, 3.25f, 0.0f, 1e30f, -1e-30f};
    const int64_t s23[2] = {2, 3};
    ttpu_tensor_t *tf = from_host(rt, f, sizeof f, TTPU_DTYPE_FLOAT32, s23, 2);
    CHECK(ttpu_tensor_numel(tf) == 6);
    CHECK(ttpu_tensor_strides(tf)[0] == 3 && ttpu_tensor_strides(tf)[1] == 1);
    CHECK(ttpu_tensor_offset(tf) == 0);
    CHECK(ttpu_tensor_device(tf) == 0);
    CHECK(ttpu_tensor_storage_numel(tf) == 6);
    float fb[6];
    CHECK_OK(ttpu_tensor_to_host(rt, tf, fb, sizeof fb));
    CHECK(memcmp(f, fb, sizeof f) == 0);

    /* int64 */
    const int64_t l[4] = {INT64_MIN, -1, 0, INT64_MAX};
    const int64_t s4[1] = {4};
    ttpu_tensor_t *tl = from_host(rt, l, sizeof l, TTPU_DTYPE_INT64, s4, 1);
    int64_t lb[4];
    CHECK_OK(ttpu_tensor_to_host(rt, tl, lb, sizeof lb));
    CHECK(memcmp(l, lb, sizeof l) == 0);

    /* uint8 */
    const uint8_t u[5] = {0, 1, 127, 128, 255};
    const int64_t s5[1] = {5};
    ttpu_tensor_t *tu = from_host(rt, u, sizeof u, TTPU_DTYPE_UINT8, s5, 1);
    uint8_t ub[5];
    CHECK_OK(ttpu_tensor_to_host(rt, tu, ub, sizeof ub));
    CHECK(memcmp(u, ub, sizeof u) == 0);

    /* bool, 2x2 */
    const bool b[4] = {true, false, false, true};
    const int64_t s22[2] = {2, 2};
    ttpu_tensor_t *tb = from_host(rt, b, sizeof b, TTPU_DTYPE_BOOL, s22, 2);
    bool bb[4];
    CHECK_OK(ttpu_tensor_to_host(rt, tb, bb, sizeof bb));
    CHECK(memcmp(b, bb, sizeof b) == 0);

    /* A scalar (ndim 0) and an empty tensor. */
    const float one = 1.0f;
    ttpu_tensor_t *ts = from_host(rt, &one, sizeof one, TTPU_DTYPE_FLOAT32, NULL, 0);
    CHECK(ttpu_tensor_numel(ts) == 1);
    const int64_t s0[2] = {0, 3};
    ttpu_tensor_t *te = from_host(rt, NULL, 0, TTPU_DTYPE_FLOAT32, s0, 2);
    CHECK(ttpu_tensor_numel(te) == 0);
    CHECK_OK(ttpu_tensor_to_host(rt, te, NULL, 0));

    /* Wrong byte counts, both ways. */
    ttpu_tensor_t *bad = NULL;
    CHECK_CODE(ttpu_tensor_from_host(rt, f, sizeof f - 4, TTPU_DTYPE_FLOAT32, s23, 2, 0, &bad),
               TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_tensor_from_host(rt, f, sizeof f + 4, TTPU_DTYPE_FLOAT32, s23, 2, 0, &bad),
               TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE_MSG(ttpu_tensor_to_host(rt, tf, fb, sizeof fb - 1), TTPU_CODE_INVALID_ARGUMENT, "destination has");
    CHECK_CODE(ttpu_tensor_to_host(rt, tf, NULL, sizeof fb), TTPU_CODE_INVALID_ARGUMENT);
    /* Negative sizes, unknown dtype, NULL pointers with lengths, bad device. */
    const int64_t neg[2] = {2, -3};
    CHECK_CODE(ttpu_tensor_from_host(rt, f, sizeof f, TTPU_DTYPE_FLOAT32, neg, 2, 0, &bad),
               TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_tensor_from_host(rt, f, sizeof f, 99, s23, 2, 0, &bad), TTPU_CODE_UNIMPLEMENTED);
    CHECK_CODE(ttpu_tensor_from_host(rt, f, sizeof f, TTPU_DTYPE_FLOAT32, NULL, 2, 0, &bad),
               TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_tensor_from_host(rt, NULL, sizeof f, TTPU_DTYPE_FLOAT32, s23, 2, 0, &bad),
               TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_tensor_from_host(rt, f, sizeof f, TTPU_DTYPE_FLOAT32, s23, 2, 99, &bad),
               TTPU_CODE_OUT_OF_RANGE);
    CHECK_CODE(ttpu_tensor_from_host(rt, f, sizeof f, TTPU_DTYPE_FLOAT32, s23, 2, 0, NULL),
               TTPU_CODE_INVALID_ARGUMENT);
    CHECK(bad == NULL);

    /* NULL handles. */
    CHECK_CODE_MSG(ttpu_tensor_to_host(rt, NULL, fb, sizeof fb), TTPU_CODE_INVALID_ARGUMENT, "ttpu_tensor_t is NULL");
    CHECK_CODE(ttpu_tensor_to_host(NULL, tf, fb, sizeof fb), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_tensor_from_host(NULL, f, sizeof f, TTPU_DTYPE_FLOAT32, s23, 2, 0, &bad),
               TTPU_CODE_INVALID_ARGUMENT);
    CHECK(ttpu_tensor_dtype(NULL) == -1);
    CHECK(ttpu_tensor_ndim(NULL) == 0);
    CHECK(ttpu_tensor_sizes(NULL) == NULL);
    CHECK(ttpu_tensor_numel(NULL) == -1);
    CHECK(!ttpu_tensor_same_storage(NULL, tf));
    ttpu_tensor_destroy(NULL);
    /* A pointer of the wrong type is rejected by its magic. */
    CHECK_CODE_MSG(ttpu_tensor_to_host(rt, (const ttpu_tensor_t *)rt, fb, sizeof fb), TTPU_CODE_INVALID_ARGUMENT,
                   "not a live ttpu_tensor_t");

    /* A view of the storage: the transposed 3x2 of tf, and a write through
     * a strided view that the base sees. */
    const int64_t s32[2] = {3, 2}, t32[2] = {1, 3};
    ttpu_tensor_t *tv = NULL;
    CHECK_OK(ttpu_tensor_view(tf, s32, t32, 2, 0, &tv));
    CHECK(ttpu_tensor_same_storage(tf, tv) && ttpu_tensor_offset(tv) == 0);
    float tb6[6];
    CHECK_OK(ttpu_tensor_to_host(rt, tv, tb6, sizeof tb6));
    CHECK(tb6[0] == f[0] && tb6[1] == f[3] && tb6[2] == f[1] && tb6[5] == f[5]);
    const int64_t s2[1] = {2}, st3[1] = {3};
    ttpu_tensor_t *col = NULL;  /* column 1: elements 1 and 4 */
    CHECK_OK(ttpu_tensor_view(tf, s2, st3, 1, 1, &col));
    ttpu_value_t zargs[1] = {test_tensor_arg(col)};
    ttpu_value_t zout[1];
    size_t nz = 0;
    CHECK_OK(ttpu_op_call(rt, "aten::zero_", zargs, 1, zout, 1, &nz));
    ttpu_tensor_destroy((ttpu_tensor_t *)zout[0].ptr);
    CHECK_OK(ttpu_tensor_to_host(rt, tf, fb, sizeof fb));
    CHECK(fb[0] == f[0] && fb[1] == 0.0f && fb[4] == 0.0f && fb[5] == f[5]);
    ttpu_tensor_t *outside = NULL;
    CHECK_CODE_MSG(ttpu_tensor_view(tf, s2, st3, 1, 4, &outside), TTPU_CODE_INVALID_ARGUMENT, "out of bounds");
    CHECK(outside == NULL);
    CHECK_CODE(ttpu_tensor_view(tf, s2, NULL, 1, 0, &outside), TTPU_CODE_INVALID_ARGUMENT);
    ttpu_tensor_destroy(col);
    ttpu_tensor_destroy(tv);
    float fz[6];  /* tf from here on: elements 1 and 4 are zero */
    memcpy(fz, f, sizeof f);
    fz[1] = fz[4] = 0.0f;

    /* Retain: a second handle to the same storage outlives the first. */
    ttpu_tensor_t *tf2 = NULL;
    CHECK_OK(ttpu_tensor_retain(tf, &tf2));
    CHECK(tf2 != tf && ttpu_tensor_same_storage(tf, tf2));
    CHECK_CODE(ttpu_tensor_retain(tf, NULL), TTPU_CODE_INVALID_ARGUMENT);

    /* Destroyed handle reuse: deterministic INVALID_ARGUMENT; double destroy
     * is a no-op; the retained handle still works. */
    ttpu_tensor_destroy(tf);
    CHECK_CODE_MSG(ttpu_tensor_to_host(rt, tf, fb, sizeof fb), TTPU_CODE_INVALID_ARGUMENT,
                   "ttpu_tensor_t was already destroyed (use after ttpu_tensor_destroy)");
    CHECK(ttpu_tensor_numel(tf) == -1);
    CHECK(ttpu_tensor_sizes(tf) == NULL);
    ttpu_tensor_t *tf3 = NULL;
    CHECK_CODE(ttpu_tensor_retain(tf, &tf3), TTPU_CODE_INVALID_ARGUMENT);
    CHECK(tf3 == NULL);
    ttpu_value_t args[2] = {test_tensor_arg(tf), test_tensor_arg(tf2)};
    ttpu_value_t outv[1];
    size_t nout = 0;
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::add.Tensor", args, 2, outv, 1, &nout), TTPU_CODE_INVALID_ARGUMENT,
                   "already destroyed");
    ttpu_tensor_destroy(tf);
    ttpu_tensor_destroy(tf);
    CHECK_OK(ttpu_tensor_to_host(rt, tf2, fb, sizeof fb));
    CHECK(memcmp(fz, fb, sizeof fz) == 0);

    /* Geometry that overflows is refused before any program is built, by
     * ttpu_tensor_view and by aten::as_strided in every mode, and the base
     * tensor stays readable. */
    {
        const float base[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        const int64_t s8[1] = {8}, sz[2] = {2, 2}, unit[2] = {1, 1};
        ttpu_tensor_t *b8 = from_host(rt, base, sizeof base, TTPU_DTYPE_FLOAT32, s8, 1);
        const int64_t bad_strides[5][2] = {{(int64_t)1 << 62, 1}, {((int64_t)1 << 62) + 1, 1}, {INT64_MAX, 1},
                                            {-1, 1}, {1, INT64_MIN}};
        const int32_t modes[3] = {TTPU_MODE_DEFER_NEVER, TTPU_MODE_DEFER_AND_FUSE,
                                  TTPU_MODE_DEFER_NEVER_AND_LAUNCH_BLOCKING};
        for (int i = 0; i < 5; i++) {
            ttpu_tensor_t *v = NULL;
            CHECK_CODE(ttpu_tensor_view(b8, sz, bad_strides[i], 2, 0, &v), TTPU_CODE_INVALID_ARGUMENT);
            CHECK(v == NULL);
            for (int m = 0; m < 3; m++) {
                CHECK_OK(ttpu_thread_set_mode(modes[m]));
                ttpu_value_t as[3] = {{TTPU_VALUE_KIND_TENSOR, 0, 0.0, b8, 0},
                                      {TTPU_VALUE_KIND_INT_LIST, 0, 0.0, sz, 2},
                                      {TTPU_VALUE_KIND_INT_LIST, 0, 0.0, bad_strides[i], 2}};
                ttpu_value_t out[1];
                size_t n = 0;
                CHECK_CODE(ttpu_op_call(rt, "aten::as_strided", as, 3, out, 1, &n), TTPU_CODE_INVALID_ARGUMENT);
            }
            CHECK_OK(ttpu_thread_set_mode(-1));
        }
        const int64_t huge_sizes[2] = {INT64_MAX, 2};
        ttpu_tensor_t *v = NULL;
        CHECK_CODE_MSG(ttpu_tensor_view(b8, huge_sizes, unit, 2, 0, &v), TTPU_CODE_INVALID_ARGUMENT, "2^63 - 1");
        CHECK_CODE_MSG(ttpu_tensor_view(b8, sz, unit, 2, INT64_MAX, &v), TTPU_CODE_INVALID_ARGUMENT, "out of bounds");
        CHECK(v == NULL);
        CHECK_F32(rt, b8, base, 8);
        ttpu_tensor_destroy(b8);
    }

    /* ndim that can fail: a 0-d tensor is 0, an invalid handle an error. */
    {
        const float one = 1.0f;
        ttpu_tensor_t *scalar = from_host(rt, &one, sizeof one, TTPU_DTYPE_FLOAT32, NULL, 0);
        size_t nd = 99;
        CHECK_OK(ttpu_tensor_ndim_checked(scalar, &nd));
        CHECK(nd == 0 && ttpu_tensor_ndim(scalar) == 0);
        ttpu_tensor_destroy(scalar);
        nd = 99;
        CHECK_CODE_MSG(ttpu_tensor_ndim_checked(scalar, &nd), TTPU_CODE_INVALID_ARGUMENT, "already destroyed");
        CHECK(nd == 99 && ttpu_tensor_ndim(scalar) == 0);
        CHECK_CODE(ttpu_tensor_ndim_checked(NULL, &nd), TTPU_CODE_INVALID_ARGUMENT);
        CHECK_CODE(ttpu_tensor_ndim_checked(tl, NULL), TTPU_CODE_INVALID_ARGUMENT);
    }

    ttpu_tensor_destroy(tf2);
    ttpu_tensor_destroy(tl);
    ttpu_tensor_destroy(tu);
    ttpu_tensor_destroy(tb);
    ttpu_tensor_destroy(ts);
    ttpu_tensor_destroy(te);
    ttpu_runtime_destroy(rt);
    printf("test_tensor: ok\n");
    return 0;
}
