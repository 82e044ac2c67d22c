// torch.autocast on device xla (``torch.autocast("xla", dtype=torch.bfloat16)``,
// ``torch_xla.amp.autocast``): PyTorch ships the AutocastXLA dispatch key and the cast wrappers
// (ATen/autocast_mode.h) but registers no kernels for it; torch_xla registers its own policy.
// This is that policy for the emulated device (docs/run-your-script.md §Autocast): matrix
// products and convolutions run in the autocast dtype, softmax / normalisation statistics and the
// losses in FP32, concatenations in the widest input dtype; every other op passes through.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace {

#define XLA_LOWER(OP) KERNEL1(c10::DeviceType::XLA, OP, lower_precision_fp)
#define XLA_LOWER2(OP, OVERLOAD) KERNEL2(c10::DeviceType::XLA, OP, OVERLOAD, lower_precision_fp)
#define XLA_FP32(OP) KERNEL1(c10::DeviceType::XLA, OP, fp32)
#define XLA_FP32_2(OP, OVERLOAD) KERNEL2(c10::DeviceType::XLA, OP, OVERLOAD, fp32)
#define XLA_PROMOTE(OP) KERNEL1(c10::DeviceType::XLA, OP, promote)

TORCH_LIBRARY_IMPL(_, AutocastXLA, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastXLA, m) {
  // TensorE work: in the autocast dtype
  XLA_LOWER(mm)
  XLA_LOWER(bmm)
  XLA_LOWER(matmul)
  XLA_LOWER(addmm)
  XLA_LOWER(addbmm)
  XLA_LOWER(baddbmm)
  XLA_LOWER(linear)
  XLA_LOWER(einsum)
  XLA_LOWER(conv1d)
  XLA_LOWER(conv2d)
  XLA_LOWER(conv3d)
  XLA_LOWER2(conv1d, padding)
  XLA_LOWER2(conv2d, padding)
  XLA_LOWER2(conv3d, padding)
  XLA_LOWER(conv_transpose1d)
  XLA_LOWER2(conv_transpose2d, input)
  XLA_LOWER2(conv_transpose3d, input)
  // numerically sensitive: in FP32
  XLA_FP32(_softmax)
  XLA_FP32_2(softmax, int)
  XLA_FP32_2(log_softmax, int)
  XLA_FP32(batch_norm)
  XLA_FP32(prod)
  XLA_FP32(cdist)
  XLA_FP32(nll_loss)
  XLA_FP32(nll_loss2d)
  XLA_FP32(cross_entropy_loss)
  XLA_FP32(mse_loss)
  XLA_FP32(l1_loss)
  XLA_FP32(smooth_l1_loss)
  XLA_FP32(kl_div)
  XLA_FP32(binary_cross_entropy)
  XLA_FP32(binary_cross_entropy_with_logits)
  // several inputs: the widest dtype among them
  XLA_PROMOTE(cat)
  XLA_PROMOTE(stack)
}

}  // namespace
