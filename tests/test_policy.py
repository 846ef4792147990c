"""The draft policies: the cost-aware choices (plain steps, how many drafts to verify), the cost model's calibration
cache, and exactness at every choice, on tiny random models. Tests assert decisions, not timings."""

import json

import pytest
import torch

from dels_hub import DeLSGenerator
from dels_hub.errors import GenerationArgumentError
from dels_hub.generation.cost_model import CostModel, cache_path, calibration_key, cost_model_for
from dels_hub.generation.policy import (
    AcceptanceCalibration,
    BlockPlan,
    CostAware,
    FixedBlocks,
    PolicyStats,
    ProbeSchedule,
    expected_tokens,
    pooled,
)

from conftest import SMALL_VOCAB, make_dflash, small_prompts

BLOCK = 8


def cost(verify_ms, draft_ms=1.0) -> CostModel:
    """A cost table as given: the loop's real timings do not refine it, so the decisions are the table's."""
    return CostModel(key={"test": True}, verify_ms=[float(v) for v in verify_ms], draft_ms=float(draft_ms),
                     refine=False)


def forcing(d: int, block_size: int = BLOCK) -> CostAware:
    """A cost-aware policy over a cost table that makes verifying more than ``d`` drafts ruinous and up to ``d``
    free: it drafts every block and verifies exactly ``d`` drafts (any draft has some chance of acceptance; so has
    a copied one, at every match length, once each was seen accepted)."""
    policy = CostAware(cost([1.0] * (d + 1) + [1e6] * (block_size - 1 - d), draft_ms=0.0))
    for length in range(1, policy.copy_acceptance.bins):
        policy.copy_acceptance.update(length, True)
    return policy


class DraftCalls:
    """Counts the drafter's forwards, and records which context positions each row's drafter cache was given."""

    def __init__(self, drafter):
        self.calls, self.context = 0, []
        drafter.register_forward_pre_hook(self.record, with_kwargs=True)

    def record(self, module, args, kwargs):
        self.calls += 1
        positions = kwargs["position_ids"]
        context = positions[:, : positions.shape[1] - module.config.block_size]
        cache = kwargs["past_key_values"]
        slots = getattr(cache, "write_positions", None)
        if slots is None:  # the eager StaticDraftCache: every context row is real
            real = torch.ones_like(context, dtype=torch.bool)
        else:  # the padded cache: padding rows are written past every position
            real = slots[:, : context.shape[1]] == context
        self.context.append([row[mask].tolist() for row, mask in zip(context, real)])

    def positions_read(self, row: int, rows: int) -> list[int]:
        """The context positions row ``row`` of a batch of ``rows`` gave its drafter, call by call, while every row
        was still in the batch (a finished row leaves it, and the rest move up)."""
        return [position for call in self.context if len(call) == rows for position in call[row]]


def test_expensive_verify_and_low_confidence_choose_plain_steps_and_never_call_the_drafter(small):
    target, drafter = small["qwen3"], make_dflash(BLOCK, SMALL_VOCAB - 1, vocab=SMALL_VOCAB)
    policy = CostAware(cost([10.0] + [400.0] * (BLOCK - 1), draft_ms=300.0))
    generator = DeLSGenerator(target, drafter, None, small["tokenizer"], policy=policy)
    calls = DraftCalls(drafter)
    input_ids = small_prompts(count=1)[0]
    out = generator.generate(input_ids, max_new_tokens=12, do_sample=False, return_dict_in_generate=True)
    assert calls.calls == 0
    assert out.policy_summary["chosen_drafts"] == {0: 11} and out.policy_summary["drafted_blocks"] == 0
    assert torch.equal(out.sequences, target.generate(input_ids, max_new_tokens=12, do_sample=False))
    # The same table after a draft: low confidence verifies no draft at all.
    plan = policy.plan([[0.05] * (BLOCK - 1)], BLOCK, 1)
    assert plan.width == 1 and plan.drafts_to_verify == [0]


def test_confident_drafts_verify_the_whole_block():
    policy = CostAware(cost([10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0], draft_ms=5.0))
    assert policy.draft_now(None)
    plan = policy.plan([[0.99] * (BLOCK - 1)], BLOCK, 1)
    assert plan.width == BLOCK and plan.drafts_to_verify == [BLOCK - 1]
    # Unsure drafts after a sure one: only the sure one is worth its verify.
    plan = policy.plan([[0.99] + [0.02] * (BLOCK - 2)], BLOCK, 1)
    assert plan.drafts_to_verify == [1]
    # A batch shares one verify: the width that pays for its rows together (a sure row carries an unsure one).
    plan = policy.plan([[0.99] * (BLOCK - 1), [0.02] * (BLOCK - 1)], BLOCK, 2)
    assert plan.width == BLOCK and plan.drafts_to_verify == [BLOCK - 1] * 2
    assert policy.plan([[0.02] * (BLOCK - 1)] * 2, BLOCK, 2).width == 1
    # Sampled drafts give no confidence: a drafted block verifies every draft (choosing from them would bias).
    assert policy.plan(None, BLOCK, 2).drafts_to_verify == [BLOCK - 1] * 2


def test_a_drafter_that_cannot_pay_even_at_best_still_probes_rarely():
    """Only drafted blocks correct the draft's cost: a wrong table must not switch drafting off for good."""
    policy = CostAware(cost([10.0] * BLOCK, draft_ms=500.0))
    decisions = [policy.draft_now(None) for _ in range(200)]
    gaps = [i for i, d in enumerate(decisions) if d]
    assert gaps == [63, 127, 191]


def test_slow_widths_are_skipped_for_a_wider_cheaper_one():
    """This CPU's verify of 2 or 3 tokens costs more than one of 4 (MKL's small-M GEMM): the policy jumps to 4."""
    policy = CostAware(cost([58.0, 93.0, 112.0, 83.0, 96.0, 93.0, 103.0, 97.0], draft_ms=27.0))
    plan = policy.plan([[0.7, 0.6, 0.5, 0.2, 0.1, 0.1, 0.1]], BLOCK, 1)
    assert plan.width == 4


def test_a_losing_drafter_switches_itself_off_and_probes_less_and_less():
    policy = CostAware(cost([10.0] * BLOCK, draft_ms=10.0))
    plain = policy.plain(1)
    decisions = []
    for _ in range(200):
        if policy.draft_now(None):
            plan = policy.plan([[0.01] * (BLOCK - 1)], BLOCK, 1)
            policy.observe(plan, [1], [True], 20.0, None)
            decisions.append(1)
        else:
            policy.observe(plain, [1], [True], 10.0, None)
            decisions.append(0)
    assert decisions[0] == 1  # unexplored: it tries
    assert sum(decisions) <= 8  # 200 blocks, probes at intervals 2, 4, 8, ..., 64
    gaps = [i for i, d in enumerate(decisions) if d]
    assert all(b - a >= 2 for a, b in zip(gaps, gaps[1:]))


def test_the_calibration_learns_what_was_accepted():
    calibration = AcceptanceCalibration()
    assert calibration(0.92) == pytest.approx(0.925)  # the prior: the bin's centre
    for _ in range(50):
        calibration.update(0.92, False)  # over-confident drafts: never accepted
    assert calibration(0.92) < 0.05
    assert expected_tokens([0.5, 0.5]) == [1.0, 1.5, 1.75]


def test_calibration_is_persisted_and_reloaded_under_its_key(small, tmp_path, monkeypatch):
    monkeypatch.setenv("DELS_HUB_CACHE", str(tmp_path))
    target, drafter = small["qwen3"], make_dflash(BLOCK, SMALL_VOCAB - 1, vocab=SMALL_VOCAB)
    generator = DeLSGenerator(target, drafter, small["head"], small["tokenizer"])
    input_ids = small_prompts(count=1)[0]
    generator.generate(input_ids, max_new_tokens=4, do_sample=False)
    files = list((tmp_path / "cost_models").glob("*.json"))
    assert len(files) == 1
    saved = json.loads(files[0].read_text())
    assert len(saved["verify_ms"]) == BLOCK and saved["draft_ms"] > 0 and saved["key"]["head"]
    # A new generator over the same parts reads it back instead of measuring.
    measured = []
    key = calibration_key(target, drafter, small["head"], block_size=BLOCK, batch=1, copy=False, draft_vocab=None,
                          compile=False, packed=generator._packed_widths(BLOCK))  # the generator's default packs
    assert cache_path(key) == files[0]
    model, cached = cost_model_for(key, lambda: measured.append(1))
    assert cached and not measured and model.verify_ms == saved["verify_ms"]
    # Another key (two threads, a batch of two) is measured anew, into its own file.
    other = dict(key, batch=2)
    model, cached = cost_model_for(other, lambda: cost([1.0] * BLOCK))
    assert not cached and len(list((tmp_path / "cost_models").glob("*.json"))) == 2
    # A file for another key at the same path is not trusted.
    files[0].write_text(json.dumps(dict(saved, key=other)))
    assert cost_model_for(key, lambda: cost([2.0] * BLOCK))[0].verify_ms == [2.0] * BLOCK


@pytest.mark.parametrize("d", range(BLOCK))
@pytest.mark.parametrize("head, copy", [(False, 0), (True, 4)])
def test_greedy_equals_the_target_at_every_number_of_verified_drafts(small, d, head, copy):
    target = small["qwen3"]
    generator = DeLSGenerator(target, make_dflash(BLOCK, SMALL_VOCAB - 1, vocab=SMALL_VOCAB),
                              small["head"] if head else None, small["tokenizer"], copy_ngram=copy, policy=forcing(d))
    for input_ids in small_prompts(count=2, length=7):
        out = generator.generate(input_ids, max_new_tokens=20, do_sample=False, return_dict_in_generate=True)
        assert torch.equal(out.sequences, target.generate(input_ids, max_new_tokens=20, do_sample=False))
        assert set(out.policy_summary["chosen_drafts"]) == {d}


@pytest.mark.parametrize("d", [0, 2, BLOCK - 1])
def test_a_batch_equals_the_target_at_every_number_of_verified_drafts(small, d):
    target, tokenizer = small["qwen3"], small["tokenizer"]
    generator = DeLSGenerator(target, make_dflash(BLOCK, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"],
                              tokenizer, copy_ngram=3, policy=forcing(d))
    prompts = [p[0].tolist() for p in small_prompts(count=3, length=7)]
    prompts[1] = prompts[1][:4]  # ragged: left-padded
    width = max(map(len, prompts))
    input_ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    out = generator.generate(input_ids, attention_mask=mask, max_new_tokens=15, do_sample=False,
                             return_dict_in_generate=True)
    for row, prompt in enumerate(prompts):
        expected = target.generate(torch.tensor([prompt]), max_new_tokens=15, do_sample=False)[0, len(prompt):]
        assert out.sequences[row, width : width + expected.shape[0]].tolist() == expected.tolist()


@pytest.mark.parametrize("rows", [1, 3])
def test_after_plain_steps_the_drafter_reads_every_context_position_once(small, rows):
    """Plain steps skip the drafter; when it drafts again it must read exactly the positions it missed (eager path
    for one row, padded for a batch). A drafter whose verify never pays drafts only on probes."""
    target, drafter = small["qwen3"], make_dflash(BLOCK, SMALL_VOCAB - 1, vocab=SMALL_VOCAB)
    policy = CostAware(cost([10.0] * BLOCK, draft_ms=12.0))  # drafting loses unless nearly every draft lands
    generator = DeLSGenerator(target, drafter, None, small["tokenizer"], policy=policy)
    calls = DraftCalls(drafter)
    input_ids = torch.cat(small_prompts(count=rows, length=7))
    out = generator.generate(input_ids, max_new_tokens=40, do_sample=False, return_dict_in_generate=True)
    summary = out.policy_summary
    assert summary["plain_blocks"] > 0 and summary["drafted_blocks"] >= 2 * rows  # plain steps between probes
    for row in range(rows):
        seen = calls.positions_read(row, rows)
        assert seen == list(range(len(seen)))  # every position once, in order, none skipped
        assert len(seen) >= 7
    for row in range(rows):
        assert torch.equal(out.sequences[row : row + 1],
                           target.generate(input_ids[row : row + 1], max_new_tokens=40, do_sample=False))


def test_fixed_blocks_verify_every_draft_and_bad_policy_values_fail_early(small):
    target = small["qwen3"]
    generator = DeLSGenerator(target, make_dflash(BLOCK, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), None, small["tokenizer"])
    input_ids = small_prompts(count=1)[0]
    out = generator.generate(input_ids, max_new_tokens=10, do_sample=False, policy="fixed",
                             return_dict_in_generate=True)
    assert set(out.policy_summary["chosen_drafts"]) == {BLOCK - 1} and out.policy_summary["policy"] == "fixed"
    with pytest.raises(GenerationArgumentError, match="policy must be one of"):
        generator.generate(input_ids, max_new_tokens=4, policy="adaptive")
    with pytest.raises(GenerationArgumentError, match="draft_mode must be one of"):
        generator.generate(input_ids, max_new_tokens=4, draft_mode="greedy")
    with pytest.raises(GenerationArgumentError, match="blocks of 4 tokens"):
        generator.generate(input_ids, max_new_tokens=4, policy=CostAware(cost([1.0] * 4)))
    with pytest.raises(GenerationArgumentError, match="policy must be one of"):
        DeLSGenerator(target, make_dflash(BLOCK, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), policy="never")
    assert FixedBlocks().draft_now([0, 3])


def test_the_cli_takes_the_policy_and_says_what_it_chose():
    from dels_hub.cli import build_parser
    from dels_hub.generation.policy import describe_policy

    args = build_parser().parse_args(["generate", "--target", "T", "--dflash", "D", "--prompt", "hi"])
    assert (args.policy, args.draft_mode, args.tree_budget) == ("cost-aware", "top", 0)
    args = build_parser().parse_args(["generate", "--target", "T", "--dflash", "D", "--prompt", "hi", "--policy",
                                      "fixed", "--draft-mode", "sampled"])
    assert (args.policy, args.draft_mode) == ("fixed", "sampled")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--target", "T", "--dflash", "D", "--prompt", "hi", "--policy", "x"])
    line = describe_policy({"policy": "cost-aware", "plain_blocks": 40, "drafted_blocks": 9, "tau_drafted": 3.5,
                            "chosen_drafts": {0: 41, 3: 2, 7: 6}})
    assert line == ("policy cost-aware: 40 plain steps, 9 drafted blocks (tau 3.50); drafts verified per block "
                    "{0: 41, 3: 2, 7: 6}")


def test_pooled_summaries_add_their_sums_and_recompute_the_rates():
    first, second = PolicyStats(), PolicyStats()
    first.record(BlockPlan(True, 8, 1, 3.0, 30.0), [4], 40.0)
    first.record(BlockPlan(False, 1, 1, 1.0, 10.0), [1], 10.0)
    second.record(BlockPlan(True, 4, 1, 2.0, 20.0), [2], 20.0)
    total = pooled([first.summary("cost-aware"), None, second.summary("cost-aware")])
    assert total["chosen_drafts"] == {0: 1, 3: 1, 7: 1}
    assert (total["drafted_blocks"], total["plain_blocks"], total["drafted_tokens"]) == (2, 1, 6)
    assert total["tau_drafted"] == 3.0
    assert total["predicted_tokens_per_ms"] == pytest.approx(6.0 / 60.0)
    assert total["measured_tokens_per_ms"] == pytest.approx(7.0 / 70.0)
    assert pooled([None]) is None


# ---- copy blocks: the copy expert's own continuation, verified without a drafter forward -----------------------


def repeating_prompts(count=1, period=3, length=8):
    """Prompts that repeat a short random phrase, so the copy expert matches at the anchor from the first block."""
    phrases = small_prompts(count=count, length=period, seed=11)
    return [phrase.repeat(1, -(-length // period))[:, :length] for phrase in phrases]


def never_drafts(verify_ms=1.0) -> CostAware:
    """A cost table on which the drafter can never pay (its forward is ruinous) and verifying is cheap: blocks are
    copy blocks where the copy expert matches at the anchor, plain steps elsewhere."""
    return CostAware(cost([verify_ms] * BLOCK, draft_ms=1e6))


def test_the_copy_continuation_follows_the_longest_most_recent_match():
    from dels_hub.copy_expert import CopyChain, CopySettings

    weights = CopySettings(max_ngram=4).weights()
    tokens = torch.tensor([[1, 2, 3, 4, 1, 2, 0, 0, 0]])
    drafts = torch.zeros((1, 3), dtype=torch.long)
    lengths = CopyChain(tokens, torch.tensor([5]), weights).continuation(3, drafts)
    assert drafts.tolist() == [[3, 4, 1]] and lengths.tolist() == [[2, 3, 4]]
    # Nothing to copy after the anchor's token: no match from the first slot on, whatever the chain picks up later.
    tokens = torch.tensor([[1, 2, 3, 4, 5, 0, 0, 0]])
    lengths = CopyChain(tokens, torch.tensor([4]), weights).continuation(3, drafts)
    assert lengths.tolist() == [[0, 0, 0]]


def test_copy_blocks_are_priced_by_their_own_continuation_and_compete_with_drafting():
    policy = CostAware(cost([10.0] * BLOCK, draft_ms=10.0))
    continuation = [[3, 4, 4, 4, 0, 0, 0]]  # match lengths per slot: the copy expert runs out after four drafts
    assert policy.block_kind([[0] * (BLOCK - 1)], can_copy=True) == "drafted"  # no match: an untried drafter
    assert policy.block_kind(continuation, can_copy=True) == "copied"  # no drafted block measured at match 3
    assert policy.block_kind([[3]], can_copy=False) == "drafted"  # sampled drafts: no copy blocks
    copy_plan = policy.copy_plan(continuation, 1)
    assert copy_plan.copied and not copy_plan.drafted and copy_plan.width == 5  # up to the last copied draft
    policy.observe(copy_plan, [5], [True], 10.0, [3])
    # Drafted blocks at match 3 measured better (8 tokens in 20 ms) than this copy block is expected to do
    # (about 3 tokens in 10 ms at the prior acceptance (m - 1) / m): draft.
    policy.observe(policy.plan([[0.9] * (BLOCK - 1)], BLOCK, 1), [BLOCK], [True], 20.0, [3])
    assert policy.block_kind(continuation, can_copy=True) == "drafted"
    # ... but not for a row of the batch whose match length has no drafted block yet.
    assert policy.block_kind([*continuation, [2, 3, 0, 0, 0, 0, 0]], can_copy=True) == "copied"
    # Drafting lost to copying at match 3: copy blocks, with a drafted probe after 16, 32, then 64 of them.
    policy.observe(policy.plan([[0.1] * (BLOCK - 1)], BLOCK, 1), [1], [True], 20.0, [3])
    policy.observe(policy.plan([[0.1] * (BLOCK - 1)], BLOCK, 1), [1], [True], 20.0, [3])
    kinds = []
    for _ in range(180):
        kinds.append(policy.block_kind(continuation, can_copy=True))
        if kinds[-1] == "copied":
            policy.observe(policy.copy_plan(continuation, 1), [5], [True], 10.0, [3])
        else:
            policy.observe(policy.plan([[0.1] * (BLOCK - 1)], BLOCK, 1), [1], [True], 20.0, [3])
    probes = [i for i, kind in enumerate(kinds) if kind == "drafted"]
    assert "plain" not in kinds and [b - a for a, b in zip(probes, probes[1:])] == [32, 64, 64]
    assert probes[0] < 16
    # A verify that costs more per token: where copies at a match of 1 were never accepted, a copy block of them
    # verifies the anchor alone; long matches that were accepted are verified.
    rising = CostAware(cost([10.0 + 2 * w for w in range(BLOCK)], draft_ms=10.0))
    for _ in range(30):
        rising.copy_acceptance.update(1, False)
        rising.copy_acceptance.update(4, True)
    assert rising.copy_plan([[1] * (BLOCK - 1)], 1).width == 1
    assert rising.copy_plan([[4] * (BLOCK - 1)], 1).width == BLOCK


def test_a_copy_block_of_nothing_is_priced_as_a_plain_step_and_short_matches_start_unlikely():
    # Copy blocks measured 50% slower than their table while plain steps kept theirs: a copy block whose expected
    # rate beats a verify of 1 at the copy blocks' price, but not a plain step at its own, takes the plain step.
    costs = CostModel(key={"test": True}, verify_ms=[10.0] * BLOCK, draft_ms=10.0,
                      scale={"plain": 1.0, "drafted": 1.0, "copied": 1.5}, refine=False)
    policy = CostAware(costs)
    for _ in range(200):  # copies at a match of 2 land a quarter of the time
        for accepted in (True, False, False, False):
            policy.copy_acceptance.update(2, accepted)
    continuation = [[2] * (BLOCK - 1)]
    expected = policy.copy_expected(continuation)[0][-1]  # about 1.33 tokens
    assert 1 / 15.0 < expected / 15.0 < 1 / 10.0
    assert policy.copy_plan(continuation, 1).kind == "plain"
    # Before any observation, a draft copied at a match of 1 is expected to fail, one copied at 4 mostly not.
    fresh = CostAware(cost([10.0] * BLOCK))
    assert fresh.copy_acceptance(1) == 0.0 and fresh.copy_acceptance(4) == pytest.approx(0.75)
    assert fresh.copy_plan([[1] * (BLOCK - 1)], 1).kind == "plain"


@pytest.mark.parametrize("rows", [1, 3])
def test_copy_blocks_equal_the_target_and_never_call_the_drafter(small, rows):
    target, drafter = small["qwen3"], make_dflash(BLOCK, SMALL_VOCAB - 1, vocab=SMALL_VOCAB)
    generator = DeLSGenerator(target, drafter, small["head"], small["tokenizer"], copy_ngram=3,
                              policy=never_drafts())
    calls = DraftCalls(drafter)
    input_ids = torch.cat(repeating_prompts(count=rows))
    out = generator.generate(input_ids, max_new_tokens=30, do_sample=False, return_dict_in_generate=True)
    summary = out.policy_summary
    assert calls.calls == 0 and summary["drafted_blocks"] == 0 and summary["copy_blocks"] >= rows
    assert summary["tau_copied"] > 1.0  # some copied drafts were accepted
    for row in range(rows):
        assert torch.equal(out.sequences[row : row + 1],
                           target.generate(input_ids[row : row + 1], max_new_tokens=30, do_sample=False))


@pytest.mark.parametrize("rows", [1, 3])
def test_after_copy_blocks_the_drafter_reads_every_context_position_once(small, rows):
    """Copy blocks commit several tokens without the drafter: when it drafts again it must read each committed
    position once, in order, and no rejected one (eager path for one row, padded for a batch)."""
    target, drafter = small["qwen3"], make_dflash(BLOCK, SMALL_VOCAB - 1, vocab=SMALL_VOCAB)
    policy = CostAware(cost([10.0] * BLOCK, draft_ms=12.0))  # drafting loses unless nearly every draft lands
    policy.matched_probe = ProbeSchedule(interval=2)  # a drafted probe soon after copy blocks, in a short text
    generator = DeLSGenerator(target, drafter, None, small["tokenizer"], copy_ngram=2, policy=policy)
    calls = DraftCalls(drafter)
    input_ids = torch.cat(repeating_prompts(count=rows))
    out = generator.generate(input_ids, max_new_tokens=60, do_sample=False, return_dict_in_generate=True)
    summary = out.policy_summary
    assert summary["copy_blocks"] > 0 and summary["drafted_blocks"] >= 2 * rows
    for row in range(rows):
        seen = calls.positions_read(row, rows)
        assert seen == list(range(len(seen)))  # every position once, in order, none skipped
        assert len(seen) > input_ids.shape[1]
        assert torch.equal(out.sequences[row : row + 1],
                           target.generate(input_ids[row : row + 1], max_new_tokens=60, do_sample=False))


def test_the_summary_line_and_the_bench_table_count_copy_blocks():
    from dels_hub.bench.report import policy_table
    from dels_hub.generation.policy import describe_policy

    stats = PolicyStats()
    stats.record(BlockPlan(False, 1, 1, 1.0, 10.0), [1], 10.0)
    stats.record(BlockPlan(False, 5, 1, 3.0, 15.0, copied=True), [4], 15.0)
    stats.record(BlockPlan(False, 3, 1, 1.5, 12.0, copied=True), [2], 12.0)
    stats.record(BlockPlan(True, 8, 1, 3.0, 30.0), [5], 30.0)
    summary = stats.summary("cost-aware")
    assert (summary["plain_blocks"], summary["copy_blocks"], summary["drafted_blocks"]) == (1, 2, 1)
    assert summary["tau_copied"] == 3.0 and summary["tau_drafted"] == 5.0
    assert describe_policy(summary) == ("policy cost-aware: 1 plain steps, 1 drafted blocks (tau 5.00), 2 copy blocks "
                                        "(tau 3.00); drafts verified per block {0: 1, 2: 1, 4: 1, 7: 1}")
    table = policy_table([{"name": "DeLS + copy", "kind": "dels", "policy": pooled([summary, summary])}])
    assert "| DeLS + copy | cost-aware | 0:25% 2:25% 4:25% 7:25% | 2 / 4 / 2 | 3.00 | 5.00 |" in table[-1]
