"""The rewrite revision: how `variants.prepare` rewrites a graph, as each new session
records it (`options.rewrite`), with what each revision changed."""

# How `prepare` rewrites, as recorded by each new session (`options.rewrite`): a session
# is always prepared with the revision it was tuned with, or its database keys would not
# match. 1: `nchwc` blocks a convolution only when both its channel counts divide by the
# block. 2: a convolution with few input channels (an RGB input) is blocked too, its
# input by the largest power of two that divides them (NCHW1c for 3 channels); and at
# import, clips become Relax maximum/minimum (`relax_import`), which a blocked layout
# passes through (MobileNet's NCHW8c graph kept 54 layout transforms around its ReLU6s);
# and `subpixel` runs its phase convolution channel-blocked. 3: `subpixel` turns the
# transposed convolution of a 1x1 input (DCGAN's first layer) into a matrix-vector product.
# 4: `winograd` blocks the graph as `nchwc` does and runs Winograd in that layout.
# 5: `subpixel`'s blocked phase convolution computes only the outputs each phase uses.
# 6: every variant legalizes float32 sigmoid, tanh, exp and erf to TOPI's polynomial forms,
# which vectorize (`fastmath.py`).
# 7: a layout transform without padding loops over its output, not its input
# (`_legalize_layout_transform`). 8: one that moves no element (an RGB input to NCHW1c)
# is a zero-copy view (MobileNet's took 0.19 ms, 2% of the network, as a tuned copy).
# 9: per-channel affine operators after a convolution (an imported BatchNormalization)
# are folded into its weights and one bias add (`affine.py`). 10: every fused kernel's
# constant operands (weights, biases) are layout-free: a schedule may store them in the
# order it reads them, packed at compile time (TVM's CPU weight prepack). 11: a layout
# transform whose output one kernel reads runs inside the convolution or matrix-product
# kernel next to it (`absorb.py`), not as a kernel of its own. 12: tasks of different
# variants whose functions are structurally equal are one task, whatever their names
# (`tasks.extract_variant_tasks`). 13: the blocked Winograd's input transform reads a
# zero-padded window of the input (`winograd.conv2d_winograd_nchwc`) instead of checking
# the bounds of each of its terms: TVM's TIR passes spent 0.4 s of every candidate's build
# on those checks (C12's candidates now compile in 0.3-0.5 s, against 0.6-1.5). 14: quantized
# TFLite layers compute in integers, requantized in fixed point as TFLite's reference
# kernels do (`integer.py`), not in float between a dequantize and a quantize (float
# graphs are unchanged: their keys are revision 13's). 15: a quantized fully connected
# layer's multiplier comes from its scales in double, as LiteRT computes it (14 took a
# float32 product of the input and weight scales, and MobileNet's head rounded one logit
# in 10^5 a step away from LiteRT). 16: an integer convolution of a few input channels not
# in fours (an RGB input) runs on the dot-product instruction too, its channels padded with
# zeros to a multiple of 4 (`dotprod`); before, TOPI's int32 code ran it (ResNet-18 int8's
# 7x7 first layer took a quarter of the network's time). 17: a quantized fully connected
# layer is written as a 1x1 convolution over a row of its input's rows (`integer.py`), so
# the blocked variant runs it on the dot-product instruction too (TOPI's int32 dense had run
# DQN int8's 3136 -> 512 layer, a third of the network). 18: a pad or NHWC max pool of a
# blocked tensor's unblocking runs on the blocked tensor (TVM infers no layout for pad;
# `blocking.pads_in_block`): each of MobileNet int8's depthwise layers, padded with its
# input's zero point, had unblocked and reblocked its input, and ResNet-18 int8's max pool
# ran in NHWC. 19: a channel split is written as slices before the blocked rewrites
# (`slices.py`): TVM's ConvertLayout kept its split points in NCHW[b]c, and NudeNet's
# (YOLOv8) graph lost its blocked and Winograd variants; float TFLite convolutions are
# blocked too, their 1-D biases first written at rank 4 (`ranks.py`); a clip written as
# max(stack(x, c)) is maximum(x, c), in every variant (`simplify.py`). 20: a blocked
# depthwise convolution pads its input itself, with the zero point, instead of reading a
# padded copy made by a kernel of its own (`padded.py`). 21: a private function's
# parameter that every call passes the same constant is that constant in its body
# (`calls.py`): the weights TVM's TFLite frontend passes to an IF's branches are folded
# like any other (openWakeWord's wake-word head transposed a 64x1536 weight at each call).
# 22: a float convolution whose output channels divide by half the block but not by the
# block (24, 40, 72, 120 on AVX-512) is blocked by that half (`variants._half_block`)
# instead of staying in NCHW: MobileNet-style models' 24-channel layers had run unblocked.
# 23: a float graph's division by a constant is a multiplication by its reciprocal
# (`simplify.py`): PaddlePaddle's hard-swish divided every activation by 6.
# 24: a float TFLite PRELU is max(x, 0) + alpha * min(x, 0) (`relax_import`), which fuses
# into the convolution before it; TVM's converter flattened the input and broadcast alpha
# to its full size, a kernel of its own reading a constant as large as the activation.
# 25: a float32 softmax computes its exp with TOPI's polynomial form (`fastmath.py`), as
# sigmoid and tanh do from 6: TOPI's softmax called libm once per value.
# 26: in the blocked variants a TFLite (NHWC) convolution whose channels the block does
# not divide stays NHWC, as the file has it, not NCHW: the NHWC channel pads of
# BlazeFace's residual blocks (TVM infers no layout for pad) had sat between transposes,
# kernels of pad, transpose, add and ReLU that MetaSchedule schedules one way, a third of
# the short-range face detector's time.
REWRITE_REVISION = 26
