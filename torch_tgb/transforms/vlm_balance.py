"""VLM balance (OVERLORD Alg. 2, seed 004): encoder and backbone cost over dp ranks and micro-batches.

A vision-language row costs twice: its images go through the vision
encoder (attention inside each image: :func:`encoder_costs`, Σ over images
of ``patches² + beta·patches``) and its packed sequence, image tokens
included, through the backbone (``balance.row_costs``: Σ over documents of
``len² + alpha·len``). A row's cost for balancing is
``encoder_weight · encoder + backbone``; :class:`VLMCost` computes both parts
from a packed row.

:func:`micro_batch_plan` cuts ``B`` rows into ``dp`` ranks × ``m``
micro-batches of ``B / (dp·m)`` rows each (``transforms.Balancer``'s plan:
micro-batches first, then micro-batches to ranks) with a registered method on
the combined cost, or with ``"vector"`` (:func:`balance_vector`, registered
here in ``BALANCERS`` as a method of per-phase costs) on both costs at once. Every micro-batch of every rank then carries about
``1/(dp·m)`` of the batch's cost, which is what a step waits for when each
micro-batch synchronises the ranks (FSDP's gathers, the encoder's
all-to-all, pipeline stages): :func:`simulated_step_time`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from torch_tgb.transforms.balance import BALANCERS, BalanceMethod, Partition, _check, row_costs
from torch_tgb.transforms.balancer import Balancer, Plan

__all__ = [
    "VLMCost",
    "balance_vector",
    "encoder_costs",
    "micro_batch_plan",
    "simulated_step_time",
]


def encoder_costs(patches_per_row: Sequence[Sequence[int] | np.ndarray], *, beta: float = 0.0) -> np.ndarray:
    """Σ over the images of each row of ``patches² + beta·patches``; float64 (``row_costs`` over images)."""
    return row_costs(patches_per_row, alpha=beta)


def balance_vector(encoder: Sequence[float] | np.ndarray, backbone: Sequence[float] | np.ndarray, parts: int) -> Partition:
    """Equal-count parts whose encoder *and* backbone loads are both even (vector LPT).

    Rows by decreasing ``encoder/E + backbone/B`` (``E``, ``B``: the per-part
    means), each to the part, not full yet, whose larger normalised load after
    taking it is smallest; ties by part index. A combined cost can put the
    encoder-heavy rows of a step in one part and the text-heavy ones in
    another with equal totals; the two phases then wait on different ranks,
    which this avoids.
    """
    enc = np.asarray(encoder, dtype=np.float64).reshape(-1)
    bb = np.asarray(backbone, dtype=np.float64).reshape(-1)
    _check(enc + bb, parts)
    size = len(enc) // parts
    e_mean, b_mean = (enc.sum() / parts) or 1.0, (bb.sum() / parts) or 1.0
    loads = np.zeros((parts, 2))
    out: Partition = [[] for _ in range(parts)]
    for i in sorted(range(len(enc)), key=lambda i: (-(enc[i] / e_mean + bb[i] / b_mean), i)):
        after = np.maximum((loads[:, 0] + enc[i]) / e_mean, (loads[:, 1] + bb[i]) / b_mean)
        after[[len(o) >= size for o in out]] = np.inf
        p = int(np.argmin(after))
        out[p].append(i)
        loads[p] += (enc[i], bb[i])
    return [sorted(o) for o in out]


def _vector(phases: np.ndarray, parts: int) -> Partition:
    return balance_vector(phases[:, 0], phases[:, 1], parts)


#: ``"vector"``: both phases even at once (``GlobalBatches(balance="vector", cost=VLMCost(...))``)
BALANCERS.register("vector", BalanceMethod(_vector, phases=True))


def micro_batch_plan(
    costs: Sequence[float] | np.ndarray,
    dp: int,
    micro_batches: int,
    method: str | None,
    *,
    encoder: Sequence[float] | np.ndarray | None = None,
    backbone: Sequence[float] | np.ndarray | None = None,
) -> Plan:
    """``Balancer(method, dp, micro_batches).plan(costs, ...)`` with the phases given as ``encoder``/``backbone``.

    ``plan[rank][k]``: the rows (ascending) of micro-batch ``k`` of ``rank``;
    ``"vector"`` (:func:`balance_vector`) balances ``encoder`` and ``backbone``
    together into the micro-batches (then their totals into ranks with ``kk``).
    """
    balancer = Balancer(method, dp, micro_batches)
    if encoder is None or backbone is None:
        if balancer.phases:
            raise ValueError(f"method={method!r} needs the encoder= and backbone= costs of the rows")
        return balancer.plan(costs)
    phases = np.stack([np.asarray(encoder, dtype=np.float64).reshape(-1),
                       np.asarray(backbone, dtype=np.float64).reshape(-1)], axis=1)
    return balancer.plan(costs, phases)


def simulated_step_time(encoder: np.ndarray, backbone: np.ndarray, plan: Plan) -> float:
    """Σ over micro-batches ``k`` of ``max_r encoder(r, k) + max_r backbone(r, k)``.

    The step of ranks that synchronise per module per micro-batch (each
    phase waits for its slowest rank); divide by the same sum with every
    part at its mean for the slowdown over perfect balance.
    """
    m = len(plan[0]) if plan else 0
    total = 0.0
    for k in range(m):
        total += max(float(encoder[plan[r][k]].sum()) for r in range(len(plan)))
        total += max(float(backbone[plan[r][k]].sum()) for r in range(len(plan)))
    return total


@dataclass(frozen=True)
class VLMCost:
    """The two costs of a packed VLM row: ``parts(row) -> (encoder, backbone)``; ``cost(row)`` combines them.

    ``grid_keys``: the row's ragged ``[n_images, 3]`` grids (t, h, w) whose
    ``t·h·w`` patches feed the encoder; ``alpha`` / ``beta`` the linear terms
    of the backbone / encoder; ``encoder_weight`` the encoder's weight in the
    combined cost (its FLOPs per unit relative to the backbone's).

    Audio is priced by duration like an image by its patches: ``audio_keys``
    are the row's ragged ``[clips]`` lengths in samples (``DecodeAudio``'s
    ``audio_lengths``), a clip is ``ceil(samples / audio_samples_per_position)``
    encoder positions (320: 20 ms at 16 kHz, Whisper's encoder after its
    stride-2 conv) and costs ``audio_weight · (positions² + beta·positions)``
    (attention inside each clip) in the encoder part, beside the images'.
    """

    alpha: float = 0.0
    beta: float = 0.0
    encoder_weight: float = 1.0
    grid_keys: tuple[str, ...] = ("image_grid_thw", "video_grid_thw")
    audio_keys: tuple[str, ...] = ("audio_lengths",)
    audio_samples_per_position: float = 320.0
    audio_weight: float = 1.0

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "encoder_weight", "audio_weight"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"VLMCost {name} must be finite and >= 0, got {value}")
        if not math.isfinite(self.audio_samples_per_position) or self.audio_samples_per_position <= 0:
            raise ValueError(f"VLMCost audio_samples_per_position must be finite and > 0, got "
                             f"{self.audio_samples_per_position}")

    def parts(self, row: Mapping[str, torch.Tensor]) -> tuple[float, float]:
        patches = [row[k].reshape(-1, 3).prod(dim=1).numpy() for k in self.grid_keys if k in row]
        flat = np.concatenate(patches) if patches else np.zeros(0)
        encoder = float(encoder_costs([flat], beta=self.beta)[0])
        clips = [row[k].reshape(-1).numpy() for k in self.audio_keys if k in row]
        if clips:
            positions = np.ceil(np.concatenate(clips) / self.audio_samples_per_position)
            encoder += self.audio_weight * float(encoder_costs([positions], beta=self.beta)[0])
        ids = row["document_ids"].reshape(-1) if "document_ids" in row else torch.zeros(0, dtype=torch.int64)
        real = ids[ids >= 0].to(torch.int64)
        lengths = torch.bincount(real).numpy() if real.numel() else np.zeros(0)
        return encoder, float(row_costs([lengths], alpha=self.alpha)[0])

    def cost(self, encoder: float, backbone: float) -> float:
        return self.encoder_weight * encoder + backbone

    def __call__(self, row: Mapping[str, torch.Tensor]) -> float:
        return self.cost(*self.parts(row))
