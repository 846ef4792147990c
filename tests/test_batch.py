"""Batched generate: left-padded prompts of different lengths, ragged acceptance, per-row stops, exact sampling."""

import json
from pathlib import Path

import pytest
import torch
from test_generation import accept_everything, chi_square_pvalue, exact_distribution

from dels_hub import DeLSGenerator, Warping
from dels_hub.errors import UnsupportedInputError

from conftest import SMALL_VOCAB, make_dflash, small_prompts

PAD = 0  # any id: padded positions are masked, and transformers fills finished rows with it too


def left_padded(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of ``[1, n_i]`` prompts, left-padded as a tokenizer with
    ``padding_side='left'`` returns them."""
    width = max(p.shape[1] for p in prompts)
    ids = torch.full((len(prompts), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - prompt.shape[1] :] = prompt[0]
        mask[row, width - prompt.shape[1] :] = 1
    return ids, mask


def ragged_prompts(count: int) -> list[torch.Tensor]:
    """Up to 4 prompts of lengths 4, 6, 3, 6 (every batch is padded). With drafter seed 5 the rows after the first
    accept whole blocks at times, so the batch exercises full, partial and zero acceptance side by side."""
    prompts = small_prompts(count=4)
    return [prompts[0][:, :4], prompts[1], prompts[3][:, :3], prompts[2]][:count]


@pytest.mark.parametrize("block_size", [2, 4, 8])
@pytest.mark.parametrize("batch_size", [2, 4])
@pytest.mark.parametrize("with_head", [False, True])
def test_batched_greedy_equals_target_generate_on_the_padded_batch(small, block_size, batch_size, with_head):
    target, new_tokens = small["qwen3"], 24
    drafter = make_dflash(block_size=block_size, mask_token_id=SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    generator = DeLSGenerator(target, drafter, small["head"] if with_head else None, small["tokenizer"], policy="fixed", draft_mode="sampled")
    prompts = ragged_prompts(batch_size)
    input_ids, attention_mask = left_padded(prompts)
    # EOS is row 0's first greedy token: row 0 stops at once, while the others run on (one to the budget).
    eos = int(target.generate(prompts[0], max_new_tokens=1, do_sample=False)[0, -1])
    settings = dict(max_new_tokens=new_tokens, eos_token_id=eos, pad_token_id=PAD)
    expected = target.generate(input_ids, attention_mask=attention_mask, do_sample=False, **settings)
    out = generator.generate(input_ids, attention_mask=attention_mask, return_dict_in_generate=True, **settings)
    assert torch.equal(out.sequences, expected)

    assert out.row_acceptance_lengths[0] == []  # the prefill's token was EOS: no block was drafted
    new_per_row = [1 + sum(row) for row in out.row_acceptance_lengths]
    assert new_tokens in new_per_row, "no row ran to the budget"
    assert out.num_new_tokens == sum(new_per_row)
    # Ragged acceptance: each row accepted exactly what it accepts alone, never cut to keep rows aligned.
    for prompt, row_lengths in zip(prompts, out.row_acceptance_lengths):
        alone = generator.generate(prompt, return_dict_in_generate=True, **settings)
        assert row_lengths == alone.acceptance_lengths
    if block_size > 2:
        assert max(max(row, default=0) for row in out.row_acceptance_lengths) > 2, "no multi-token acceptance"


def test_batched_greedy_with_the_copy_expert_and_llama(small):
    target = small["llama"]
    drafter = make_dflash(block_size=4, mask_token_id=SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    generator = DeLSGenerator(target, drafter, small["head"], small["tokenizer"], copy_ngram=2, copy_gamma=3.0, policy="fixed", draft_mode="sampled")
    prompts = [torch.cat([p] * 2, dim=1) for p in ragged_prompts(3)]  # repeats, so the copy expert votes
    input_ids, attention_mask = left_padded(prompts)
    expected = target.generate(input_ids, attention_mask=attention_mask, max_new_tokens=20, do_sample=False,
                               pad_token_id=PAD)
    out = generator.generate(input_ids, attention_mask=attention_mask, max_new_tokens=20, pad_token_id=PAD,
                             return_dict_in_generate=True)
    assert torch.equal(out.sequences, expected)
    for prompt, row_lengths in zip(prompts, out.row_acceptance_lengths):
        assert row_lengths == generator.generate(prompt, max_new_tokens=20, return_dict_in_generate=True).acceptance_lengths


def batch_counts(generator, input_ids, attention_mask, samples, new_tokens, **kwargs) -> list[dict]:
    rng = torch.Generator().manual_seed(7)
    counts = [{} for _ in range(input_ids.shape[0])]
    for _ in range(samples):
        out = generator.generate(input_ids, attention_mask=attention_mask, max_new_tokens=new_tokens, do_sample=True,
                                 generator=rng, pad_token_id=PAD, **kwargs)
        for row, row_counts in enumerate(counts):
            key = tuple(out[row, input_ids.shape[1] :].tolist())
            row_counts[key] = row_counts.get(key, 0) + 1
    return counts


def batched_sampling_pvalues(small, samples=1500, new_tokens=3) -> list[float]:
    target = small["qwen3"]
    generator = DeLSGenerator(target, make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"],
                              small["tokenizer"], policy="fixed", draft_mode="sampled")
    prompts = ragged_prompts(2)  # different prompts, different lengths
    input_ids, attention_mask = left_padded(prompts)
    warping = Warping(0.8, 0, 0.9)
    counts = batch_counts(generator, input_ids, attention_mask, samples, new_tokens, temperature=0.8, top_p=0.9,
                          top_k=0)
    return [chi_square_pvalue(row_counts, exact_distribution(target, prompt, warping, new_tokens), samples)
            for prompt, row_counts in zip(prompts, counts)]


def test_batched_sampling_matches_the_target_distribution_per_row(small):
    assert min(batched_sampling_pvalues(small)) > 1e-3


def test_negative_control_a_biased_verifier_is_detected_in_a_batch(small, monkeypatch):
    monkeypatch.setattr("dels_hub.verify.verify_rejection", accept_everything)
    assert min(batched_sampling_pvalues(small)) < 1e-6


def test_seeded_batched_sampling_is_reproducible(small):
    generator = DeLSGenerator(small["qwen3"], make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"],
                              small["tokenizer"], policy="fixed", draft_mode="sampled")
    input_ids, attention_mask = left_padded(ragged_prompts(3))
    runs = [generator.generate(input_ids, attention_mask=attention_mask, max_new_tokens=16, do_sample=True, seed=5,
                               pad_token_id=PAD) for _ in range(2)]
    assert torch.equal(*runs)


def test_batches_that_cannot_run_are_refused_before_work(small):
    generator = DeLSGenerator(small["qwen3"], make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), None,
                              small["tokenizer"], policy="fixed", draft_mode="sampled")
    input_ids, attention_mask = left_padded(ragged_prompts(2))
    right_padded = attention_mask.flip(1)
    with pytest.raises(UnsupportedInputError, match=r"attention_mask row 0 .* expected left padding"):
        generator.generate(input_ids, attention_mask=right_padded, max_new_tokens=4)
    with pytest.raises(UnsupportedInputError, match="all zeros"):
        generator.generate(input_ids, attention_mask=torch.zeros_like(attention_mask), max_new_tokens=4)
    with pytest.raises(UnsupportedInputError, match=r"attention_mask has shape \(2, 5\)"):
        generator.generate(input_ids, attention_mask=attention_mask[:, 1:], max_new_tokens=4)
    with pytest.raises(UnsupportedInputError, match="a streamer takes one sequence"):
        generator.generate(input_ids, attention_mask=attention_mask, max_new_tokens=4, streamer=object())
    with pytest.raises(UnsupportedInputError, match="batches need the static-cache loop"):
        generator.generate(input_ids, attention_mask=attention_mask, max_new_tokens=4, fast=False)
    generator.compile = True
    with pytest.raises(UnsupportedInputError, match="compiled decoding runs one row at a time"):
        generator.generate(input_ids, attention_mask=attention_mask, max_new_tokens=4)


# -- batch size 1 is unchanged --------------------------------------------------------------------------------

REFERENCE = Path(__file__).parent / "fixtures" / "batch1_reference.json"


def batch1_runs(small) -> dict:
    """Seeded sampled and greedy single-row runs through every mode of the loop (head, copy expert, DynamicCache),
    token for token: recorded from commit 9c52e68, before batches, by ``python tests/test_batch.py``."""
    drafter = make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    runs = {}
    for name, head, copy in [("dflash", None, 0), ("dels", small["head"], 0), ("dels+copy", small["head"], 2)]:
        generator = DeLSGenerator(small["qwen3"], drafter, head, small["tokenizer"], copy_ngram=copy, policy="fixed", draft_mode="sampled")
        for index, prompt in enumerate(small_prompts(count=3)):
            for fast in (True, False):
                for sampled in (False, True):
                    settings = dict(do_sample=True, temperature=0.9, top_p=0.95, seed=index) if sampled else {}
                    out = generator.generate(prompt, max_new_tokens=24, fast=fast, return_dict_in_generate=True,
                                             **settings)
                    key = f"{name}/{index}/{'static' if fast else 'dynamic'}/{'sampled' if sampled else 'greedy'}"
                    runs[key] = {"tokens": out.sequences[0].tolist(), "acceptance": out.acceptance_lengths}
    return runs


def recorded_on() -> dict:
    """Float rounding and vectorized kernels differ between torch versions and CPU instruction sets: the reference
    holds for the ones it was recorded on."""
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def test_batch_size_one_draws_and_decodes_exactly_as_before_batches(small):
    reference = json.loads(REFERENCE.read_text())
    recorded = reference.pop("_recorded_on")
    if recorded != recorded_on():
        pytest.skip(f"the reference was recorded on {recorded}, this is {recorded_on()}")
    assert batch1_runs(small) == reference


if __name__ == "__main__":  # record the reference (run from the repository root on the commit to compare with)
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import make_head, make_target, make_tokenizer

    tokenizer = make_tokenizer(SMALL_VOCAB - 2)
    small = {"tokenizer": tokenizer, "qwen3": make_target("qwen3", vocab=SMALL_VOCAB),
             "head": make_head(tokenizer, vocab=SMALL_VOCAB - 2, alpha=0.8, beta=0.3)}
    runs = {"_recorded_on": recorded_on()} | batch1_runs(small)
    REFERENCE.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in runs.items()) + "\n}\n")
