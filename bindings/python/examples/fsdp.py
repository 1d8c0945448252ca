"""The GPT example (gpt.py) trained with FSDP2: every transformer block and
the whole model are `fully_shard`ed, so each rank holds 1/N of the
parameters, gradients and AdamW state, and all-gathers a block's parameters
just before it runs. The ordinary CUDA script, with backend "tpu" and
device "tpu".

    torchrun --nproc-per-node=2 fsdp.py
"""

from __future__ import annotations

import torch.nn as nn
from torch.distributed.fsdp import fully_shard

import ddp


def shard(model: nn.Module) -> nn.Module:
    for block in model.blocks:
        fully_shard(block)
    return fully_shard(model)


if __name__ == "__main__":
    ddp.run(ddp.parse(__doc__), shard)
