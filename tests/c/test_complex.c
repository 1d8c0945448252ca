/* Complex tensors through the C ABI (since API 1.8): complex64 data in
 * PyTorch's interleaved layout goes up and down unchanged, ops that take
 * complex tensors compute them (values by hand), the parts come out as
 * float32, an FFT, and an op without complex support refuses by name. */
#include "check.h"

#include <math.h>

int main(void) {
    ttpu_runtime_t *rt = test_runtime();
    CHECK(ttpu_api_version() >= 1008);
    /* 1+2i, 3-i, 0.5i */
    const float z[6] = {1, 2, 3, -1, 0, 0.5f};
    const int64_t s3[1] = {3};
    ttpu_tensor_t *tz = NULL;
    CHECK_OK(ttpu_tensor_from_host(rt, z, sizeof z, TTPU_DTYPE_COMPLEX64, s3, 1, 0, &tz));
    CHECK(ttpu_tensor_dtype(tz) == TTPU_DTYPE_COMPLEX64);
    CHECK_F32(rt, tz, z, 6);
    /* A byte count for float32 elements is refused (8 bytes each). */
    ttpu_tensor_t *bad = NULL;
    CHECK_CODE(ttpu_tensor_from_host(rt, z, 12, TTPU_DTYPE_COMPLEX64, s3, 1, 0, &bad), TTPU_CODE_INVALID_ARGUMENT);
    /* complex32 has no StableHLO type. */
    CHECK_CODE_MSG(ttpu_tensor_from_host(rt, z, 6, 8, s3, 1, 0, &bad), TTPU_CODE_UNIMPLEMENTED, "complex32");

    ttpu_value_t out[2];
    size_t n = 0;
    /* z * z: -3+4i, 8-6i, -0.25. */
    ttpu_value_t sq[2] = {test_tensor_arg(tz), test_tensor_arg(tz)};
    CHECK_OK(ttpu_op_call(rt, "aten::mul.Tensor", sq, 2, out, 1, &n));
    const float want_sq[6] = {-3, 4, 8, -6, -0.25f, 0};
    CHECK(ttpu_tensor_dtype((const ttpu_tensor_t *)out[0].ptr) == TTPU_DTYPE_COMPLEX64);
    CHECK_F32(rt, (const ttpu_tensor_t *)out[0].ptr, want_sq, 6);
    ttpu_tensor_destroy((ttpu_tensor_t *)out[0].ptr);

    /* |z| is real: sqrt(5), sqrt(10), 0.5. */
    ttpu_value_t one[1] = {test_tensor_arg(tz)};
    CHECK_OK(ttpu_op_call(rt, "aten::abs", one, 1, out, 1, &n));
    const ttpu_tensor_t *mag = (const ttpu_tensor_t *)out[0].ptr;
    CHECK(ttpu_tensor_dtype(mag) == TTPU_DTYPE_FLOAT32);
    float got[6];
    CHECK_OK(ttpu_tensor_to_host(rt, mag, got, 3 * sizeof(float)));
    CHECK(fabsf(got[0] - sqrtf(5)) < 1e-6f && fabsf(got[1] - sqrtf(10)) < 1e-6f && got[2] == 0.5f);
    ttpu_tensor_destroy((ttpu_tensor_t *)out[0].ptr);

    /* The parts as float32 [3, 2]. */
    CHECK_OK(ttpu_op_call(rt, "aten::view_as_real_copy", one, 1, out, 1, &n));
    const ttpu_tensor_t *parts = (const ttpu_tensor_t *)out[0].ptr;
    CHECK(ttpu_tensor_dtype(parts) == TTPU_DTYPE_FLOAT32 && ttpu_tensor_ndim(parts) == 2);
    CHECK(ttpu_tensor_sizes(parts)[0] == 3 && ttpu_tensor_sizes(parts)[1] == 2);
    CHECK_F32(rt, parts, z, 6);
    ttpu_tensor_destroy((ttpu_tensor_t *)out[0].ptr);

    /* FFT of [1, i, -1, -i] (e^{i pi k / 2}): 4 at frequency 1, else 0. */
    const float w[8] = {1, 0, 0, 1, -1, 0, 0, -1};
    const int64_t s4[1] = {4}, dims[1] = {0};
    ttpu_tensor_t *tw = NULL;
    CHECK_OK(ttpu_tensor_from_host(rt, w, sizeof w, TTPU_DTYPE_COMPLEX64, s4, 1, 0, &tw));
    ttpu_value_t fft[4] = {test_tensor_arg(tw), {TTPU_VALUE_KIND_INT_LIST, 0, 0.0, dims, 1},
                           {TTPU_VALUE_KIND_INT, 0, 0.0, NULL, 0}, {TTPU_VALUE_KIND_BOOL, 1, 0.0, NULL, 0}};
    CHECK_OK(ttpu_op_call(rt, "aten::_fft_c2c", fft, 4, out, 1, &n));
    float spec[8];
    CHECK_OK(ttpu_tensor_to_host(rt, (const ttpu_tensor_t *)out[0].ptr, spec, sizeof spec));
    const float want_spec[8] = {0, 0, 4, 0, 0, 0, 0, 0};
    for (int i = 0; i < 8; i++) CHECK(fabsf(spec[i] - want_spec[i]) < 1e-6f);
    ttpu_tensor_destroy((ttpu_tensor_t *)out[0].ptr);

    /* An op without complex support refuses, naming itself and the dtype. */
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::erf", one, 1, out, 1, &n), TTPU_CODE_UNIMPLEMENTED, "aten::erf");
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::erf", one, 1, out, 1, &n), TTPU_CODE_UNIMPLEMENTED, "complex64");
    /* Still usable. */
    CHECK_OK(ttpu_runtime_synchronize(rt));

    ttpu_tensor_destroy(tw);
    ttpu_tensor_destroy(tz);
    ttpu_runtime_destroy(rt);
    printf("test_complex: ok\n");
    return 0;
}
