"""`specdec distill`: train a features draft (features.py) for a target by self-distillation.

1. Data (traindata.py): the target's own greedy continuations of training prompts (HF
   `generate` in batches, left-padded), cached per batch in the user cache so a rerun skips
   what it already made.
2. Features (traindata.py): hooks on the target's decoder keep the hidden states at the taps
   (engine/taps.py; the final one f_i among them) that `generate` computes anyway; the labels
   y_i are the greedy tokens it chose.
3. Training: a linear warm start (least squares), then at every position j the block drafts
   `unroll` tokens the way it drafts in the loop (FeatureBlock.unroll); loss = cross-entropy
   against the target's distribution at j+s (its LM head over f_{j+s}, as EAGLE-1) + `reg` x
   smooth-L1 between the predicted and the true feature f_{j+s}, for s = 1..unroll. The step's
   matmuls run in bfloat16 (autocast; docs/distill.md has what it saves); the learning rate
   warms up, holds, and decays linearly to 0 over the last quarter of the steps.
4. Held-out prompts measure acceptance per draft position as it trains (teacher-forced: the
   chance the i-th drafted token equals the target's greedy token, given the ones before did);
   every new best is written at once (so Ctrl-C keeps it): model.safetensors and a card.

Reproducible from the seed on one machine: prompt order, batches, initialisation and every
step. The clock only decides how much data to make and, when three quarters of the training time
are spent, how many steps the run takes (the decay then ends with the budget); the file records
the prompts and steps it used, and `--prompts N --steps M` replays that run exactly.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from specdec_cli.engine import taps
from specdec_cli.engine.models import HFLM
from specdec_cli.engine.taps import ONLY_FINAL
from specdec_cli.drafts import features_block as features
from specdec_cli.errors import SpecdecError
from specdec_cli.files import write_atomic, write_text_atomic
from specdec_cli.cards.prompts import Prompt
from specdec_cli.loop.schedule import expected_tokens
from specdec_cli.training.selfprompts import self_prompts
from specdec_cli.training.traindata import Batcher, Sequence, draft_vocab, make_data, order_prompts, spread


@dataclass(frozen=True)
class Settings:
    minutes: float = 30.0  # wall-clock budget: data generation + training
    seed: int = 0
    steps: int | None = None  # train exactly this many steps (replays a run; the clock is ignored)
    prompts: int | None = None  # use exactly this many training prompts (replays a run's data)
    self_prompts: int = 0  # requests the target writes itself (selfprompts.py), spread among the given prompts
    data_share: float = 0.5  # of the budget, at most, for generating data (the draft is data-limited on a CPU)
    max_new_tokens: int = 128  # continuation length per prompt (EOS ends one sooner)
    gen_batch: int = 64  # prompts per generate call (larger batches generate faster: docs/distill.md)
    heldout: int = 24  # prompts held out to measure acceptance (never trained on)
    vocab: int = 8192  # draft vocabulary size (see draft_vocab; >= the target's: all of it)
    unroll: int = 2  # drafted steps trained per position (1 = EAGLE-1; 2+ = training-time test)
    reg: float = 1.0  # weight of the feature regression beside the token loss
    noise: float = 0.2  # Gaussian noise on the input features, x their RMS (EAGLE: robustness to its own errors)
    warm_start: bool = True  # fc from least squares first (False: from random weights only)
    taps: tuple[int, ...] = ONLY_FINAL  # the target's hidden states the block reads (engine/taps.py; docs/distill.md)
    width: int | None = None  # the block's MLP width (None: half the target's; more only overfits small data)
    lr: float = 1e-3
    warmup: int = 50  # steps of linear warm-up, then a constant rate ...
    decay: float = 0.25  # ... and over this share (0 <= decay < 1) of the steps, linearly down to 0 (see decay_start)
    bf16: bool = True  # the training step's matmuls in bfloat16 (autocast; the weights stay float32)
    batch: int = 8  # sequences per step
    eval_every: int = 50  # steps between held-out measurements (each may checkpoint)
    positions: int = 4  # acceptance measured for draft positions 1..positions


@dataclass
class Progress:
    """What the trainer reports (rendering is the caller's)."""

    phase: str  # prompts | data | train | done
    done: float  # units of `total` done
    total: float
    prompts: int = 0
    tokens: int = 0  # training tokens (data) / tokens trained on so far (train)
    step: int = 0
    loss: float | None = None
    alpha: list[float] = field(default_factory=list)  # latest held-out acceptance by position
    best: list[float] = field(default_factory=list)  # acceptance of the best (saved) weights


# ---------------------------------------------------------------------------- inputs
def check_out(path: Path) -> None:
    """An --out folder we can write (made if missing), checked before anything is loaded."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".specdec-write-test-"):
            pass
    except FileExistsError:
        raise SpecdecError(f"command line: --out: {path} exists and is not a folder") from None
    except OSError as e:
        raise SpecdecError(f"command line: --out: cannot write to {path}: {e.strerror or e}") from None


# ---------------------------------------------------------------------------- training
def warm_start(block: features.FeatureBlock, batcher: Batcher, seqs: list[Sequence], ridge: float = 1.0) -> None:
    """Start from the best linear guess: `fc` = the least-squares map from (f_j, embed(t_{j+1}))
    to f_{j+1} over the training data (ridge-regularised), with the attention and MLP outputs
    zeroed, so step 0 already drafts like a linear predictor and training learns the rest. With
    several taps, `fuse` starts by passing the final one through (the other taps at zero)."""
    H = block.cfg.hidden
    xtx = torch.zeros(2 * H, 2 * H, dtype=torch.float64, device=batcher.device)
    xty = torch.zeros(2 * H, H, dtype=torch.float64, device=batcher.device)
    for i in range(0, len(seqs), 16):
        feats, embeds, _, lengths = batcher(seqs[i:i + 16])
        feats = block.final(feats)
        S = feats.shape[1]
        valid = torch.arange(S - 1, device=feats.device)[None] + 1 < lengths[:, None]  # f_{j+1} exists
        x = torch.cat([feats[:, :-1], embeds[:, 1:S]], dim=-1)[valid].double()
        xtx += x.T @ x
        xty += x.T @ feats[:, 1:][valid].double()
    xtx += ridge * torch.eye(2 * H, dtype=torch.float64, device=xtx.device)
    with torch.no_grad():
        if block.fuse is not None:
            block.fuse.weight.zero_()
            block.final(block.fuse.weight).copy_(torch.eye(H))
        block.fc.weight.copy_(torch.linalg.solve(xtx, xty).T.float())
        block.o.weight.zero_()
        block.down.weight.zero_()


def losses(block, head_w, inputs, feats, embeds, lengths, steps: int, reg: float):
    """(mean loss over steps 1..steps, per-step outputs): see the module doc. `inputs`: the
    features the block reads (`feats`, perhaps with noise); `feats`: the true ones (all taps)."""
    B, S, _ = feats.shape
    outs = block.unroll(inputs, embeds, steps)
    feats = block.final(feats)
    anchors = torch.arange(S, device=feats.device)[None]
    with torch.no_grad():  # the target's own distribution over the draft vocabulary (EAGLE-1), once per position
        p = torch.zeros(B, S, head_w.shape[0], device=feats.device)
        real = anchors < lengths[:, None]
        p[real] = F.linear(feats[real], head_w).float().softmax(-1)
    total = 0.0
    for s, h in enumerate(outs, 1):
        rows, cols = (anchors + s < lengths[:, None]).nonzero(as_tuple=True)  # anchors j with y_{j+s}, f_{j+s}
        logits = F.linear(h[rows, cols], head_w).float()
        ce = -(p[rows, cols + s] * logits.log_softmax(-1)).sum(-1).mean()
        mse = F.smooth_l1_loss(h[rows, cols].float(), feats[rows, cols + s])
        total = total + ce + reg * mse
    return total / steps, outs


@torch.no_grad()
def acceptance(block, head_w, batcher: Batcher, seqs: list[Sequence], positions: int) -> list[float]:
    """Held-out teacher-forced acceptance α_1..α_positions over the generated part: α_i = the
    share of drafts whose i-th token is the target's greedy token, among those whose first
    i-1 were (a draft token outside the draft vocabulary is a miss)."""
    hits, tries = [0] * positions, [0] * positions
    for i in range(0, len(seqs), 8):
        items = seqs[i:i + 8]
        feats, embeds, labels, lengths = batcher(items)
        B, S, _ = feats.shape
        outs = block.unroll(feats, embeds, positions)
        ids = embeds.new_zeros(B, S + positions, dtype=torch.long)
        for b, q in enumerate(items):
            ids[b, :len(q.ids)] = torch.tensor(q.ids, device=ids.device)
        anchors = torch.arange(S, device=feats.device)[None]
        first = torch.tensor([q.prompt_len - 2 for q in items], device=feats.device)[:, None]
        alive = anchors >= first  # drafting starts at the prompt's last pair
        for s, h in enumerate(outs, 1):
            valid = alive & (anchors + s < lengths[:, None])
            want = F.pad(labels[:, s:], (0, s), value=-1)  # y_{j+s} as draft rows
            right = (F.linear(h, head_w).argmax(-1) == want) & (want >= 0)
            hits[s - 1] += int((valid & right).sum())
            tries[s - 1] += int(valid.sum())
            if s < positions:  # step s+1 was fed t_{j+s+1}: a chain goes on only where that is the drafted y_{j+s}
                alive = valid & right & (batcher.row[ids[:, s + 1:s + 1 + S]] == want)
    return [h / t if t else 0.0 for h, t in zip(hits, tries)]


# ---------------------------------------------------------------------------- the run
@dataclass
class Outcome:
    weights: Path
    card: Path
    alpha: list[float]  # held-out acceptance of the saved weights, by position
    steps: int  # steps trained in all
    best_step: int  # the step the saved weights come from
    tokens: int  # training tokens (positions) in the data
    prompts: int  # training prompts used
    heldout: int
    data_s: float
    train_s: float
    interrupted: bool = False


def block_config(lm, vocab: int, width: int | None = None, taps: tuple[int, ...] = ONLY_FINAL) -> features.BlockConfig:
    """The block's shape from the target's: its hidden size, head count and MLP width."""
    text = lm.config.get_text_config(decoder=True)
    hidden, target_vocab = features.target_shape(lm)
    heads = getattr(text, "num_attention_heads", max(1, hidden // 64))
    if hidden % heads or (hidden // heads) % 2:
        heads = max(1, hidden // 64)
    rope = getattr(text, "rope_parameters", None) or {}
    theta = float(rope.get("rope_theta", getattr(text, "rope_theta", 10000.0)))
    width = width or getattr(text, "intermediate_size", 4 * hidden) // 2
    return features.BlockConfig(hidden, heads, width, vocab, target_vocab, theta, tuple(taps))


def distill(pair, prompts: list[Prompt], s: Settings, out: Path, command: str, source: str,
            report: Callable[[Progress], None] = lambda p: None) -> Outcome:
    """The whole run (see the module doc). `source` names where the prompts came from."""
    if not isinstance(pair.target, HFLM):
        raise SpecdecError(f"{pair.card.path}: target: a features draft needs a transformers target, got '{pair.card.target}'")
    check_out(out)
    layers = pair.target.config.get_text_config(decoder=True).num_hidden_layers
    problem = taps.check(s.taps, layers)
    if problem:
        raise SpecdecError(f"command line: --taps: {problem}")
    begun = time.monotonic()
    fp = features.fingerprint(pair.target)

    def made(done: float, total: float, trained_on: int, tokens: int) -> None:  # the data phase's progress
        report(Progress("data", done, total, trained_on, tokens))

    own = self_prompts(pair, s.self_prompts, s.seed, s.gen_batch,
                       report=lambda done, total: report(Progress("prompts", done, total, done))) if s.self_prompts else []
    seqs = make_data(pair, spread(order_prompts(prompts, s.seed), order_prompts(own, s.seed)), s.heldout, s.prompts, s.gen_batch, s.max_new_tokens, fp,
                     begun + s.data_share * s.minutes * 60, made, s.taps)
    meta = {"target": pair.card.target, "card": pair.card.name, "fingerprint": fp, "command": command,
            "prompts_source": source, "seed": s.seed, "settings": asdict(s)}
    return train(pair, seqs, s, out, meta, begun, report)


def train(pair, seqs: list[Sequence], s: Settings, out: Path, meta: dict, begun: float,
          report: Callable[[Progress], None] = lambda p: None) -> Outcome:
    """Train on `seqs` until s.steps, or until `begun` + the budget; keep the best weights."""
    check_out(out)
    lm, budget, data_s = pair.target, s.minutes * 60, time.monotonic() - begun
    training, held = [q for q in seqs if not q.heldout], [q for q in seqs if q.heldout]
    cfg = block_config(lm, min(s.vocab, lm.vocab_size), s.width, s.taps)
    vocab_ids = draft_vocab(seqs, cfg.vocab, cfg.target_vocab).to(pair.device)
    torch.manual_seed(s.seed)
    block = features.FeatureBlock(cfg).to(pair.device)
    head_w = lm.model.get_output_embeddings().weight.detach()[vocab_ids].float()  # [N, H]
    batcher = Batcher(pair, seqs, vocab_ids, max(s.unroll, s.positions))
    if s.warm_start:
        warm_start(block, batcher, training)
    opt = torch.optim.AdamW(block.parameters(), lr=s.lr, betas=(0.9, 0.95), weight_decay=0.01)
    rng = torch.Generator().manual_seed(s.seed)
    tokens = sum(len(q.ids) for q in training)
    meta = {**meta, "prompts": len(training), "heldout": len(held), "tokens": tokens, "data_seconds": round(data_s, 1),
            "threads": torch.get_num_threads()}
    command = meta["command"]
    weights, card_path = out / "model.safetensors", out / f"{pair.card.name}-features.yaml"
    best, best_alpha, best_step, step, loss_value, interrupted = -1.0, [], 0, 0, None, False
    stop_at = None if s.steps is not None else begun + budget
    train_start = time.monotonic()

    def evaluate_and_keep() -> list[float]:
        nonlocal best, best_alpha, best_step
        block.eval()
        alpha = acceptance(block, head_w, batcher, held, s.positions)
        block.train()
        if expected_tokens(alpha) - 1 > best:  # expected accepted tokens per round
            best, best_alpha, best_step = expected_tokens(alpha) - 1, alpha, step
            info = {**meta, "steps": step, "alpha": [round(a, 4) for a in alpha],
                    "train_seconds": round(time.monotonic() - train_start, 1)}
            write_atomic(weights, lambda p: features.save(p, block, vocab_ids, info), "draft weights")
            write_text_atomic(card_path, card_text(pair.card, weights.name, command, alpha), "card")
        return alpha

    total = s.steps  # known in a replay; a clock run fixes it once (1 - decay) of its training time is spent
    decay_at = None if s.steps is not None else train_start + (1 - s.decay) * (stop_at - train_start)

    def total_done():
        if total is not None:
            return step, total
        return time.monotonic() - train_start, max(1e-9, stop_at - train_start)

    alpha = evaluate_and_keep()
    report(Progress("train", *total_done(), len(training), 0, 0, None, alpha, best_alpha))
    order: list[int] = []
    seen = 0  # tokens (positions) trained on so far
    try:
        while True:
            if total is None and time.monotonic() >= decay_at:
                total = steps_decaying_from(step, s.decay)
            if total is not None and step >= total:
                break
            if not order:
                order = torch.randperm(len(training), generator=rng).tolist()
            items, order = [training[i] for i in order[: s.batch]], order[s.batch:]
            for group in opt.param_groups:
                group["lr"] = learning_rate(s, step, total)
            feats, embeds, labels, lengths = batcher(items)
            inputs = feats
            if s.noise:  # on what the block reads only; the targets stay exact. Each tap's noise x its own RMS
                rms = (feats.pow(2).mean().sqrt() if len(cfg.taps) == 1 else
                       feats.unflatten(-1, (-1, cfg.hidden)).pow(2).mean((0, 1, 3)).sqrt().repeat_interleave(cfg.hidden))
                inputs = feats + s.noise * rms * torch.randn(feats.shape, generator=rng).to(feats.device)
            with bf16(pair.device, s.bf16):
                loss, _ = losses(block, head_w, inputs, feats, embeds[:, : feats.shape[1] + s.unroll], lengths, s.unroll, s.reg)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(block.parameters(), 1.0)
            opt.step()
            step += 1
            seen += int(lengths.sum())
            loss_value = float(loss.detach())
            if step % s.eval_every == 0:
                alpha = evaluate_and_keep()
            report(Progress("train", *total_done(), len(training), seen, step, loss_value, alpha, best_alpha))
        if step % s.eval_every:
            alpha = evaluate_and_keep()
    except KeyboardInterrupt:
        interrupted = True  # the best weights so far are already on disk
    report(Progress("done", 1, 1, len(training), seen, step, loss_value, alpha, best_alpha))
    return Outcome(weights, card_path, best_alpha, step, best_step, tokens, len(training), len(held), data_s,
                   time.monotonic() - train_start, interrupted)


@contextmanager
def bf16(device: torch.device, enabled: bool):
    """Autocast to bfloat16, quiet about the RMSNorm that then runs unfused (its input is
    bfloat16, its weight float32: torch warns once per process, and the result is right)."""
    with warnings.catch_warnings(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled):
        warnings.filterwarnings("ignore", message="Mismatch dtype between input and weight")
        yield


def decay_start(total: int, share: float) -> int:
    """The step the learning rate starts its linear decay in a run of `total` steps."""
    return total - int(total * share)


def steps_decaying_from(step: int, share: float) -> int:
    """The run length whose decay starts at `step`: a clock run reaching its decay time at
    `step` trains that many steps, and `--steps` with that number replays it exactly."""
    total = step
    while decay_start(total, share) < step:  # decay_start grows by 0 or 1 per step: this lands on `step`
        total += 1
    return total


def learning_rate(s: Settings, step: int, total: int | None) -> float:
    """Linear warm-up, constant, then linear decay to 0 over the last `s.decay` of `total`
    steps (warmup-stable-decay: the run length need not be known until the decay begins)."""
    rate = s.lr * min(1.0, (step + 1) / s.warmup)
    if total is not None and step >= decay_start(total, s.decay):
        rate *= (total - step) / (total - decay_start(total, s.decay))
    return rate


def card_text(card, weights: str, command: str, alpha: list[float]) -> str:
    """A ready card beside the weights: the source card's target and decoding settings."""
    import yaml

    target = card.target
    if not target.startswith(("pkg:", "toy")) and not target.startswith("random:"):
        path = Path(target).expanduser()
        local = path if path.is_absolute() else card.folder / path
        target = str(local.resolve()) if local.exists() else target
    elif target.startswith("random:"):
        path = Path(target[7:]).expanduser()
        target = "random:" + str((path if path.is_absolute() else card.folder / path).resolve())
    raw = {"description": f"{card.target} with a features draft trained by specdec distill",
           "target": target, "draft": {"kind": "features", "weights": weights},
           "decoding": {"k": card.k, "max_tokens": card.max_tokens, "chat_template": card.chat_template},
           "device": card.device, "dtype": card.dtype}
    if card.trust_remote_code:
        raw["trust_remote_code"] = True
    head = (f"# Made by: {command}\n# Held-out teacher-forced acceptance by draft position: "
            f"{' '.join(f'{a:.3f}' for a in alpha)}\n")
    return head + yaml.safe_dump(raw, sort_keys=False)
