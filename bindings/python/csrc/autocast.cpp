// Automatic mixed precision on the "tpu" device: torch.autocast("tpu", dtype=
// torch.bfloat16 | torch.float16).
//
// The policy is PyTorch's standard one, the op lists CUDA and XPU register
// (ATen/autocast_mode.h): matmuls, convolutions, linear and attention run in
// the autocast dtype (lower_precision_fp); pointwise transcendentals, norms,
// losses, softmax and reductions run in float32 (fp32, fp32_set_opt_dtype,
// fp32_append_dtype); ops mixing dtypes run in the widest input dtype
// (promote). Every other op falls through to the next dispatch key
// unchanged. Registered for AutocastPrivateUse1, the key PyTorch puts in front
// of a PrivateUse1 tensor's kernels while torch.autocast("tpu") is enabled.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torchtpu_ext {
namespace {

using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// As on CUDA: binary_cross_entropy is unsafe under autocast (the log of a
// probability rounded to a 16-bit type), and PyTorch refuses it there.
Tensor binary_cross_entropy_banned(const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // lower_precision_fp: inputs cast to the autocast dtype.
#define TTPU_KERNEL_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(TTPU_KERNEL_LOWER_PRECISION_FP)
#undef TTPU_KERNEL_LOWER_PRECISION_FP

  // fp32: inputs cast to float32.
#define TTPU_KERNEL_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(TTPU_KERNEL_FP32)
#undef TTPU_KERNEL_FP32

  // fp32_set_opt_dtype: the op's optional dtype argument set to float32
  // (unless the caller gave one).
#define TTPU_KERNEL_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(TTPU_KERNEL_FP32_SET_OPT_DTYPE)
#undef TTPU_KERNEL_FP32_SET_OPT_DTYPE

  // fp32_append_dtype: norm redispatched to its overload with a dtype.
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

  // promote: inputs cast to the widest floating dtype among them.
#define TTPU_KERNEL_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(TTPU_KERNEL_PROMOTE)
#undef TTPU_KERNEL_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));
}

}  // namespace

}  // namespace torchtpu_ext
