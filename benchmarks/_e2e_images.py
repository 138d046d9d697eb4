"""The image workload of ``end_to_end.py``: a WebDataset of real-size JPEGs, its producer pipeline, a tiny VLM.

**Data.** ``write_dataset`` draws ``images`` distinct JPEGs of 0.5-2 MP (the
``skimage.data`` photographs resized to a random size and aspect ratio
between 3:4 and 16:9, with film grain, JPEG q90; drawn images where
scikit-image is missing) and writes ``samples`` WebDataset samples, each one
of those JPEGs (cycled) with its own caption of 140-150 random words, in tar
shards of ``per_tar`` samples. A sample is known by its caption: the digest of
its tokens (``caption_digest``) names it in every batch, which is what the
exactly-once checks count.

**Producer pipeline** (``pipeline``): ``sources.WebDataset`` -> ``DecodeImages``
-> ``ResizeImages`` (a square side: ``(res/14)²`` patches; or a schedule) ->
``Patchify`` (patch 14, merge 2) -> ``SpliceImageTokens`` -> ``PackSamples``
-> ``GlobalBatches`` (``batch`` rows, keys ``KEYS``). Captions of 140-150
tokens make every row hold exactly one sample at every resolution (two never
fit in ``seq_len(res)``, also in a 224 -> 448 schedule packed at 448's
length), so a step is ``batch`` image-text pairs whatever the resolution.

**Model** (``TinyVLM``): a patch encoder (linear 588 -> ``d_enc``, GELU, 2x2
merger to ``d_model``) and a one-layer causal GPT (``d_model`` 32, 2 heads,
tied LM head over 1024 ids) over the packed sequence, image embeddings in
place of the image tokens; AdamW. Its cost grows with the patches and the
sequence, as a VLM's does. One thread (``torch.set_num_threads(1)``). On a
GPU (``end_to_end.py --device cuda``) the same model, larger
(``GPU_MODEL``), steps in bf16 autocast.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import torch_tgb as tgb
from torch_tgb.layout import RaggedRows

PATCH, MERGE = 14, 2
#: the compressed namespace's codecs (``b_zstd``, the calibration's coded read): a patch's 3 planes of 14x14
CODECS = {"pixel_values": f"zstd:1+delta:3x{PATCH}x{PATCH}"}
IMAGE_TOKEN, START_ID, END_ID = 1000, 1001, 1002
VOCAB = 1024
CAPTION_WORDS = (140, 150)
#: what a batch carries to the trainer (both setups): tokens, labels and the ragged patches
KEYS = ("input_ids", "labels", "pixel_values", "image_grid_thw")
SEQ_KEYS = ("input_ids", "labels")


@dataclass(frozen=True)
class ModelSpec:
    d_enc: int = 32
    d_model: int = 32
    layers: int = 1
    heads: int = 2

    def describe(self) -> str:
        return (f"patch encoder 588->{self.d_enc} + GELU + 2x2 merger ->{self.d_model}; {self.layers}-layer causal "
                f"GPT d={self.d_model}, {self.heads} heads, tied LM head over {VOCAB} ids; AdamW lr 1e-3; 1 thread")


def tokens_per_image(resolution: int) -> int:
    return (resolution // (PATCH * MERGE)) ** 2


def seq_len(resolution: int) -> int:
    """Backbone tokens of a row at ``resolution``: one image's tokens + start/end + the longest caption."""
    return tokens_per_image(resolution) + 2 + CAPTION_WORDS[1]


def layout() -> tgb.Layout:
    return tgb.Layout(dp=1, seq_keys=SEQ_KEYS)


# --- data -------------------------------------------------------------------------------------------


def _draw(rng: np.random.Generator, pixels: float, photos: list[np.ndarray], k: int) -> np.ndarray:
    from PIL import Image

    from torch_tgb.testing.media import synthetic_image

    aspect = float(rng.uniform(0.75, 16 / 9))
    w = max(16, int((pixels * aspect) ** 0.5))
    h = max(16, int(pixels / w))
    if photos:
        base = Image.fromarray(photos[k % len(photos)])
        if rng.random() < 0.5:
            base = base.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        image = np.asarray(base.resize((w, h), Image.Resampling.LANCZOS), dtype=np.int16)
    else:
        image = synthetic_image(h, w, k).astype(np.int16)
    grain = rng.normal(0.0, 4.0, image.shape).astype(np.int16)
    return np.clip(image + grain, 0, 255).astype(np.uint8)


def write_dataset(root: Path, *, samples: int, images: int, per_tar: int, min_mp: float = 0.5, max_mp: float = 2.0,
                  seed: int = 0) -> dict[str, Any]:
    """Write the WebDataset (see the module docstring); returns its urls, sizes and the key of each caption."""
    import webdataset as wds

    from torch_tgb.testing.media import encode_image, photos, word_tokenizer

    rng = np.random.default_rng(seed)
    pool = photos()
    jpegs, pixels = [], []
    for k in range(images):
        image = _draw(rng, float(rng.uniform(min_mp, max_mp)) * 1e6, pool, k)
        jpegs.append(encode_image(image, "JPEG", quality=90))
        pixels.append(image.shape[0] * image.shape[1])
    vocab = [f"w{i}" for i in range(5000)]
    root.mkdir(parents=True, exist_ok=True)
    urls, keys = [], {}
    for start in range(0, samples, per_tar):
        path = root / f"shard-{start // per_tar:05d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for i in range(start, min(samples, start + per_tar)):
                words = rng.choice(vocab, int(rng.integers(CAPTION_WORDS[0], CAPTION_WORDS[1] + 1))).tolist()
                caption = " ".join(words)
                key = f"s{i:06d}"
                sink.write({"__key__": key, "jpg": jpegs[i % images], "txt": caption})
                keys[caption_digest(torch.tensor(word_tokenizer([caption])[0]))] = key
        urls.append(str(path))
    if len(keys) != samples:
        raise RuntimeError(f"{samples - len(keys)} captions collide: the exactly-once check could not tell them apart")
    return {"urls": urls, "keys": keys, "samples": samples, "images": images,
            "image_mp_mean": float(np.mean(pixels)) / 1e6, "image_mp_min": min(pixels) / 1e6,
            "image_mp_max": max(pixels) / 1e6, "jpeg_kib_mean": float(np.mean([len(j) for j in jpegs])) / 1024,
            "jpegs": jpegs, "source": "skimage.data photographs, resized" if pool else "drawn images (no scikit-image)"}


def pipeline(urls: Sequence[str], *, resolution: int | Callable[[int], int], batch: int, seq: int,
             shard: tuple[int, int] = (0, 1)) -> Any:
    """The producer pipeline of the module docstring: one global batch of ``batch`` samples per step."""
    from torch_tgb import datapipes, sources
    from torch_tgb.testing.media import word_tokenizer

    docs = sources.WebDataset(list(urls), shard=shard, seed=1, text_field="txt", tokenizer=word_tokenizer)
    images = datapipes.DecodeImages(docs, on_error="raise")
    resized = datapipes.ResizeImages(images, resolution, patch=PATCH, merge=MERGE, documents_per_step=batch,
                                     on_error="raise")
    patches = datapipes.Patchify(resized, patch=PATCH, merge=MERGE, on_error="raise")
    spliced = datapipes.SpliceImageTokens(patches, image_token_id=IMAGE_TOKEN, merge=MERGE, start_id=START_ID,
                                          end_id=END_ID, on_error="raise")
    rows = datapipes.PackSamples(spliced, seq, window=batch, label_ignore_ids=spliced.special_ids,
                                 attention_metadata=False, on_error="raise")
    return datapipes.GlobalBatches(rows, global_batch_size=batch, layout=layout(), keys=KEYS)


def reader_form(batch: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A global batch as a rank of dp=1 reads it from a TGB: ragged keys as values + ``_offsets``."""
    out: dict[str, torch.Tensor] = {}
    for key, value in batch.items():
        if isinstance(value, RaggedRows):  # what GlobalBatches hands out: the rows joined already
            out[key], out[key + "_offsets"] = value.values, value.offsets
        elif isinstance(value, list):
            out[key] = torch.cat(value)
            out[key + "_offsets"] = torch.tensor([0, *np.cumsum([len(v) for v in value]).tolist()])
        else:
            out[key] = value
    return out


def batch_bytes(batch: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in batch.values() if isinstance(t, torch.Tensor))


def caption_digest(tokens: torch.Tensor) -> str:
    return hashlib.blake2b(tokens.to(torch.int64).numpy().tobytes(), digest_size=8).hexdigest()


def row_digests(batch: dict[str, torch.Tensor]) -> list[str]:
    """The caption digest of each row (its word tokens: not image, start/end or padding)."""
    ids = batch["input_ids"].to(torch.int64)
    words = (ids > 0) & (ids < IMAGE_TOKEN)
    return [caption_digest(ids[r][words[r]]) for r in range(ids.shape[0]) if bool(words[r].any())]


def image_digest(pixels: torch.Tensor) -> str:
    return hashlib.blake2b(pixels.contiguous().numpy().tobytes(), digest_size=8).hexdigest()


def first_image_digests(batch: dict[str, torch.Tensor]) -> dict[str, str]:
    """caption digest -> digest of that row's patches (what a recomputation must reproduce)."""
    offs = batch["pixel_values_offsets"].tolist()
    return {d: image_digest(batch["pixel_values"][offs[r]:offs[r + 1]]) for r, d in enumerate(row_digests(batch))}


def recompute_patches(jpeg: bytes, resolution: int) -> torch.Tensor:
    """The patches of one JPEG at ``resolution`` as the stages make them (decode, resize, patchify)."""
    from torch_tgb.transforms.media import decode_image
    from torch_tgb.transforms.vision import patchify, resize_frames

    image = resize_frames(decode_image(jpeg), (resolution, resolution))
    return patchify(image, PATCH, merge=MERGE)[0]


# --- the model --------------------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


class TinyVLM(nn.Module):
    """See the module docstring."""

    def __init__(self, spec: ModelSpec, max_seq: int = 4096) -> None:
        super().__init__()
        self.patch = nn.Sequential(nn.Linear(3 * PATCH * PATCH, spec.d_enc), nn.GELU())
        self.merger = nn.Linear(MERGE * MERGE * spec.d_enc, spec.d_model)
        self.tokens = nn.Embedding(VOCAB, spec.d_model)
        self.positions = nn.Embedding(max_seq, spec.d_model)
        self.blocks = nn.ModuleList(Block(spec.d_model, spec.heads) for _ in range(spec.layers))
        self.norm = nn.LayerNorm(spec.d_model)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["input_ids"].long()
        x = self.tokens(ids)
        e = self.patch(batch["pixel_values"].float() / 127.5 - 1.0)
        e = self.merger(e.reshape(-1, MERGE * MERGE * e.shape[-1]))
        x = x.masked_scatter((ids == IMAGE_TOKEN)[..., None], e.to(x.dtype))  # bf16 under autocast
        x = x + self.positions(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.tokens.weight.T


class Trainer:
    """The model, its optimizer and one training step on a batch in reader form."""

    def __init__(self, spec: ModelSpec, device: str = "cpu") -> None:
        torch.manual_seed(0)
        self.device = torch.device(device)
        self.model = TinyVLM(spec).to(self.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)

    def step(self, batch: dict[str, torch.Tensor]) -> float:
        """One step on a batch already on the model's device; on a GPU in bf16 autocast, ending on the loss read."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            logits = self.model(batch)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), batch["labels"].reshape(-1).long(),
                               ignore_index=-100)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return float(loss.detach())


def flops_per_step(spec: ModelSpec, resolution: int, batch: int) -> float:
    """Forward + backward FLOPs of one step (3x the forward's multiply-adds x 2), matmuls and attention only."""
    n_patch = batch * (resolution // PATCH) ** 2
    seq = seq_len(resolution)
    d = spec.d_model
    enc = n_patch * 588 * spec.d_enc + n_patch // 4 * 4 * spec.d_enc * d
    block = batch * seq * 12 * d * d + batch * seq * seq * d  # qkv/proj/mlp; causal attention (QK^T + AV, halved)
    head = batch * seq * d * VOCAB
    return 6.0 * (enc + spec.layers * block + head)


def spec_dict(spec: ModelSpec) -> dict[str, Any]:
    return {**asdict(spec), "describe": spec.describe()}


def jpeg_reader(info: dict[str, Any]) -> Callable[[str], bytes]:
    """key -> the JPEG bytes of that sample (samples cycle over the distinct images)."""
    jpegs = info["jpegs"]
    return lambda key: jpegs[int(key[1:]) % len(jpegs)]


def decode_mp(jpeg: bytes) -> float:
    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as im:
        return im.width * im.height / 1e6
