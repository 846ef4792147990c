"""How much of a block to speculate: per block, whether to draft at all, and how many drafts to verify.

``FixedBlocks`` drafts every block and verifies all ``block_size - 1`` drafts (the paper's loop). ``CostAware``, the
default, maximises expected committed tokens per millisecond, as vLLM's dynamic speculation and DSpark do, with
plain decoding among its choices, so that speculation that does not pay switches itself off:

* **Before drafting** it compares a plain step (1 token for ``cost.plain_ms()``) with what drafted blocks have
  committed per millisecond lately, kept apart by the copy expert's match length at the anchor (a match is the
  strongest sign that the next tokens are predictable, and it costs nothing to read). When drafting has been losing
  it decodes plainly, and probes again after 2, 4, 8, ... plain steps (at most ``MAX_PROBE_INTERVAL``).
* **Copy blocks.** Where the copy expert matches at the anchor (and drafts are not sampled), the rival of a drafted
  block is a *copy block* instead of a plain step: the copy expert's own continuation verified as drafts, as prompt
  lookup does, with no drafter forward. The loop hands the policy that continuation's match lengths, slot by slot,
  before anything is drafted, so each copy block is priced by its own continuation: the d copied drafts that
  maximise expected tokens per ``cost.copied_ms``, d = 0 (a plain step) included, each draft's acceptance read from
  the match length it was copied at (``CopyAcceptance``, learned online: a draft copied at a match of 1 is accepted
  far less often than one copied at 4). Where text repeats, the fused drafts mostly are that continuation anyway (the
  copy vote outweighs the other experts), so the block drafts only where drafted blocks at this match length have
  measured better than the copy block's expected rate, and probes a drafted block after 16, 32, then every 64
  matched blocks (``MATCHED_PROBE_INTERVAL``).
* **After drafting** it verifies the d in 0..k drafts that maximises

      (1 + sum_{i <= d} prod_{j <= i} a_j) / (draft_ms + verify_ms[d])      (verify_ms[w - 1]: a verify of w tokens)

  where a_j is the acceptance of draft j given that the drafts before it were accepted, read from the fused
  distribution's confidence in it (DFlash, head, prior and copy vote together) through a calibration table that
  learns, online, how often drafts of each confidence were accepted. A batch shares one verify, so it verifies the
  width that maximises its rows' expected tokens together per millisecond.

* **Trees or chains** (a call with ``tree_budget`` N): a tree verifies many more tokens than a chain for a longer
  accepted path, which pays where a wide verify costs little more than a narrow one (a GPU) and not where it costs in
  proportion (a CPU). So each drafted block is a chain or a tree of N, N/2, N/4, ... nodes (``tree.budget_ladder``),
  whichever shape has committed the most tokens per measured millisecond (mean over its blocks); each is tried
  first, largest tree first, and a losing one again after 2, 4, 8, ... drafted blocks (at most
  ``MAX_PROBE_INTERVAL``; the trees share one schedule, which probes the best of the losing trees). A tree block
  verifies all its nodes.

  Sampled drafts (rejection sampling) verify every draft of a block they draft: which drafts face the verifier must
  not depend on what was sampled, or the output leans away from the target's distribution. For them the policy
  only decides whether to draft. Greedy and top-token drafts may choose d from the drafts: what they commit is the
  target's own choice whatever is verified.

Both are host decisions on small host lists; the loop hands them what it transferred anyway, plus the drafts'
confidences (one ``[B, k]`` transfer per drafted block, which the verify's width must wait for); the copy
continuation's match lengths come in the block's own transfer.
"""

from collections import Counter
from dataclasses import dataclass, field

from .cost_model import CostModel
from .tree import TreeSettings, budget_ladder

POLICIES = ("cost-aware", "fixed")
CONFIDENCE_BINS = 20
PRIOR_WEIGHT = 2.0  # pseudo-observations at the raw confidence, per bin, before any acceptance is seen
VALUE_RATE = 0.25  # weight of one drafted block in its bucket's running tokens and milliseconds
MAX_PROBE_INTERVAL = 64  # plain steps between probes at most: a drafter that never pays costs under 2% this way
MATCHED_PROBE_INTERVAL = 16  # copy blocks at a match before the first drafted probe there (then 32, 64, 64, ...)
MAX_COPY_LENGTH_BINS = 16  # copy blocks' acceptance is kept per match length up to this
PLAIN, DRAFTED, COPIED = "plain", "drafted", "copied"  # the kinds of block (``cost_model.BLOCK_KINDS``)


@dataclass
class AcceptanceCalibration:
    """P(draft j accepted | drafts before it accepted) as a function of the draft's confidence, in equal bins over
    [0, 1]. Each bin starts from ``PRIOR_WEIGHT`` pseudo-observations at its centre (a calibrated drafter's
    confidence is its acceptance) and then counts what the verifier did."""

    bins: int = CONFIDENCE_BINS
    accepted: list[float] = field(default_factory=list)
    seen: list[float] = field(default_factory=list)

    def __post_init__(self):
        self.accepted = self.accepted or [0.0] * self.bins
        self.seen = self.seen or [0.0] * self.bins

    def bin(self, confidence: float) -> int:
        return min(max(int(confidence * self.bins), 0), self.bins - 1)

    def prior(self, b: int) -> float:
        return (b + 0.5) / self.bins  # the bin's centre

    def __call__(self, confidence: float) -> float:
        b = self.bin(confidence)
        return (self.accepted[b] + PRIOR_WEIGHT * self.prior(b)) / (self.seen[b] + PRIOR_WEIGHT)

    def update(self, confidence: float, accepted: bool) -> None:
        b = self.bin(confidence)
        self.seen[b] += 1
        self.accepted[b] += accepted


@dataclass
class CopyAcceptance(AcceptanceCalibration):
    """P(copied draft accepted | drafts before it accepted) by the match length m it was copied at (one bin per m,
    the last one for every longer match), from a prior of (m - 1) / m (no match: never) and what the verifier did.
    The prior is what the recorded HumanEval and ShareGPT anchors measured, near enough: 18% at m = 1, 40-54% at 2,
    65-70% at 3 and 88-91% at 4 or more (``results/smollm2/cost-aware/policy-replay/``): a one-token match is mostly
    a common token that recurs with another continuation."""

    bins: int = MAX_COPY_LENGTH_BINS

    def bin(self, length: int) -> int:
        return min(max(int(length), 0), self.bins - 1)

    def prior(self, b: int) -> float:
        return (b - 1) / b if b else 0.0


def learn_acceptance(calibration: AcceptanceCalibration, plan: "BlockPlan", counts: list[int],
                     complete: list[bool]) -> None:
    """Fold one block's verified drafts into ``calibration``: each row's drafts up to its first rejection, by the
    confidence (or match length) the plan chose them at. Rows cut by a stop token or their budget say nothing."""
    if plan.confidence is None:
        return
    for row, (count, whole) in enumerate(zip(counts, complete)):
        if not whole:
            continue
        accepted = count - 1
        for j, c in enumerate(plan.confidence[row][: plan.width - 1]):
            calibration.update(c, j < accepted)
            if j >= accepted:
                break


def expected_tokens(acceptance: list[float]) -> list[float]:
    """``E[d]`` for d = 0..k: committed tokens when d drafts are verified, ``1 + sum_i prod_{j <= i} a_j``."""
    expected, survive = [1.0], 1.0
    for a in acceptance:
        survive *= a
        expected.append(expected[-1] + survive)
    return expected


def best_width(expected: list[list[float]], block_ms, widths: tuple[int, ...]) -> tuple[float, int]:
    """``(rate, width)``: the verify width among ``widths`` that maximises the rows' expected tokens together
    (``expected[b][w - 1]``) per ``block_ms(w)``; a tie goes to the narrower (drafts that add nothing are not worth
    their compute)."""
    return max(((sum(e[w - 1] for e in expected) / block_ms(w), w) for w in widths), key=lambda c: (c[0], -c[1]))


@dataclass
class BlockPlan:
    """What the policy chose for one block: ``width`` tokens per row are verified (1: the anchor alone),
    ``drafted`` whether the drafter ran (``copied``: the copy expert's continuation was verified instead), for how
    many ``rows``, and the tokens it expects. Every row verifies ``width - 1`` drafts: the rows share the forward."""

    drafted: bool
    width: int
    rows: int
    expected: float | None  # committed tokens the policy expects from the block, summed over rows (None: no model)
    predicted_ms: float
    confidence: list[list[float]] | None = None  # the drafts' confidences (a copy block's match lengths), [B][k]
    tree: object | None = None  # the tree's settings (``tree.TreeSettings``) when the block drafted a tree
    call_tree: object | None = None  # the call's tree settings (its blocks are trees or chains), None: chains only
    copied: bool = False

    @property
    def kind(self) -> str:
        return DRAFTED if self.drafted else COPIED if self.copied else PLAIN

    @property
    def drafts_to_verify(self) -> list[int]:
        return [self.width - 1] * self.rows


# The fields of ``PolicyStats`` that runs add up (its rates are recomputed from them).
SUMMED = ("drafted_blocks", "plain_blocks", "tree_blocks", "copy_blocks", "drafted_tokens", "copied_tokens",
          "predicted_tokens", "predicted_ms", "committed_tokens", "measured_ms")


@dataclass
class PolicyStats:
    """What a call's policy did: how often each d was chosen, and the tokens per millisecond it predicted against
    what the loop measured (a calibrated cost model keeps them close)."""

    chosen: Counter = field(default_factory=Counter)  # d (drafts verified, per row; 0 for a plain step) -> count
    drafted_blocks: int = 0  # row-blocks: a block of a batch of B rows counts B times
    plain_blocks: int = 0
    tree_blocks: int = 0  # drafted row-blocks that were trees (their width is the tree's size, in ``chosen`` too)
    copy_blocks: int = 0  # row-blocks that verified the copy expert's continuation (no drafter forward)
    drafted_tokens: int = 0  # committed by drafted blocks
    copied_tokens: int = 0  # committed by copy blocks
    predicted_tokens: float = 0.0
    predicted_ms: float = 0.0
    committed_tokens: int = 0
    measured_ms: float = 0.0

    def record(self, plan: BlockPlan, counts: list[int], measured_ms: float) -> None:
        self.chosen[plan.width - 1] += plan.rows
        if plan.drafted:
            self.drafted_blocks += len(counts)
            self.tree_blocks += len(counts) if plan.tree is not None else 0
            self.drafted_tokens += sum(counts)
        elif plan.copied:
            self.copy_blocks += len(counts)
            self.copied_tokens += sum(counts)
        else:
            self.plain_blocks += len(counts)
        if plan.expected is not None:
            self.predicted_tokens += plan.expected
            self.predicted_ms += plan.predicted_ms
        self.committed_tokens += sum(counts)
        self.measured_ms += measured_ms

    def summary(self, policy: str) -> dict:
        return {
            "policy": policy,
            "chosen_drafts": {int(d): n for d, n in sorted(self.chosen.items())},
            "drafted_blocks": self.drafted_blocks,
            "plain_blocks": self.plain_blocks,
            "tree_blocks": self.tree_blocks,
            "copy_blocks": self.copy_blocks,
            "tau_drafted": self.drafted_tokens / self.drafted_blocks if self.drafted_blocks else None,
            "tau_copied": self.copied_tokens / self.copy_blocks if self.copy_blocks else None,
            "predicted_tokens_per_ms": self.predicted_tokens / self.predicted_ms if self.predicted_ms else None,
            "measured_tokens_per_ms": self.committed_tokens / self.measured_ms if self.measured_ms else None,
            # the sums behind the rates, so that runs can be pooled (the bench sums them over prompts)
            "predicted_tokens": self.predicted_tokens,
            "predicted_ms": self.predicted_ms,
            "committed_tokens": self.committed_tokens,
            "measured_ms": self.measured_ms,
            "drafted_tokens": self.drafted_tokens,
            "copied_tokens": self.copied_tokens,
        }


class FixedBlocks:
    """Draft every block and verify every draft: ``block_size`` tokens per row, always."""

    needs_confidence = False
    name = "fixed"

    def __init__(self, cost: CostModel | None = None):
        self.cost = cost

    def draft_now(self, match_lengths: list[int] | None) -> bool:
        return True

    def block_kind(self, copy_lengths: list[list[int]] | None, can_copy: bool) -> str:
        return DRAFTED

    def tree_shape(self, tree: TreeSettings) -> TreeSettings | None:
        return tree

    def plan(self, confidence: list[list[float]] | None, block_size: int, rows: int, call_tree=None) -> BlockPlan:
        predicted = self.cost.drafted_ms(block_size) if self.cost else 0.0
        return BlockPlan(True, block_size, rows, None, predicted, call_tree=call_tree)

    def tree_plan(self, size: int, rows: int, tree, call_tree=None) -> BlockPlan:
        return BlockPlan(True, size, rows, None, 0.0, tree=tree, call_tree=call_tree or tree)

    def plain(self, rows: int) -> BlockPlan:  # block size 1 (nothing to draft) takes plain steps under any policy
        return BlockPlan(False, 1, rows, None, self.cost.plain_ms() if self.cost else 0.0)

    def observe(self, plan: BlockPlan, counts: list[int], complete: list[bool], measured_ms: float,
                match_lengths: list[int] | None, timed: bool = True) -> None:
        if self.cost is not None and timed and plan.tree is None:
            self.cost.observe(plan.kind, plan.width, measured_ms)


@dataclass
class ProbeSchedule:
    """When a losing choice is tried again: after ``interval`` decisions it lost (2, doubled after each probe that
    lost, back to 2 after one that won)."""

    waited: int = 0
    interval: int = 2


@dataclass
class DraftValue:
    """A bucket's running committed tokens (of one row) and milliseconds (of the whole block) per block, and its
    probing schedule (shared by the buckets of one kind of block: one exploration budget, not one per match
    length). Its rate compares with a plain step's 1 token per row per ``plain_ms``."""

    tokens: float = 0.0
    ms: float = 0.0
    blocks: int = 0
    schedule: ProbeSchedule = field(default_factory=ProbeSchedule)

    def rate(self) -> float | None:
        return self.tokens / self.ms if self.blocks and self.ms > 0 else None


def pooled_rate(values) -> float | None:
    """Tokens per millisecond of several buckets' blocks together (None when none has a block)."""
    tokens = sum(v.blocks * v.tokens for v in values)
    ms = sum(v.blocks * v.ms for v in values)
    return tokens / ms if ms > 0 else None


class CostAware:
    """Maximise expected committed tokens per millisecond: plain steps when drafting does not pay, and how many
    drafts to verify (module docstring). Its calibration and running values live as long as the generator,
    so later calls start from what earlier ones learned."""

    needs_confidence = True
    name = "cost-aware"

    def __init__(self, cost: CostModel, widths: tuple[int, ...] | None = None):
        self.cost = cost
        # Verify widths the loop may use: all of them, or a fixed set (compiled runs: one graph each).
        self.widths = tuple(range(1, cost.block_size + 1)) if widths is None else tuple(sorted(widths))
        self.calibration = AcceptanceCalibration()
        self.values: dict[int, DraftValue] = {}  # drafted blocks' running value by match length at the anchor
        self.copy_acceptance = CopyAcceptance()
        self.draft_schedule, self.tree_schedule = ProbeSchedule(), ProbeSchedule()
        self.matched_probe = ProbeSchedule(interval=MATCHED_PROBE_INTERVAL)  # drafted blocks where copy blocks win
        self.shapes: dict = {}  # tree settings (None: the chain) -> its running tokens per measured ms
        self.hopeless_wait = 0  # plain steps since the last probe of a drafter that could not pay even at best

    def bucket(self, match_length: int | None) -> DraftValue:
        return self.values.setdefault(match_length or 0, DraftValue(schedule=self.draft_schedule))

    def block_kind(self, copy_lengths: list[list[int]] | None, can_copy: bool) -> str:
        """``PLAIN``, ``DRAFTED`` or ``COPIED``: what this block does, from each row's copy continuation at its
        anchor ``[B][k]`` (the match length each slot's token would be copied at; ``[B][1]``, the first slot alone,
        where copy blocks are not allowed; None without the copy expert). ``can_copy``: copy blocks are allowed (the
        copy expert is on and drafts are not sampled). Without a match, drafted blocks compete with plain steps
        (``draft_now``); with one, a copy block is taken unless drafted blocks at every row's match length measured
        better than its expected rate (``copy_plan``), with a drafted probe now and then (module docstring)."""
        match_lengths = None if copy_lengths is None else [row[0] for row in copy_lengths]
        if not (can_copy and any(match_lengths or [])):
            return DRAFTED if self.draft_now(match_lengths) else PLAIN
        copy_rate, _ = best_width(self.copy_expected(copy_lengths), self.cost.copied_ms, self.widths)
        drafted = [self.bucket(m).rate() for m in match_lengths]
        if None not in drafted and sum(drafted) > max(copy_rate, len(drafted) / self.cost.plain_ms()):
            return DRAFTED
        probe = self.matched_probe
        probe.waited += 1
        if probe.waited < probe.interval:
            return COPIED
        probe.waited, probe.interval = 0, min(2 * probe.interval, MAX_PROBE_INTERVAL)
        return DRAFTED

    def draft_now(self, match_lengths: list[int] | None) -> bool:
        """Draft this block, or take a plain step: drafted blocks' recent tokens per millisecond in each row's bucket
        against a plain step's, and the losing side waits for its next probe. A bucket without a drafted block yet
        reads the rate of all drafted blocks so far (the first block drafts); exploring each bucket at once would cost
        a short text more than it learns. Where a block could not pay even if every draft were accepted, it never
        drafts."""
        plain_rate = 1.0 / self.cost.plain_ms()
        best_case = max(w / self.cost.drafted_ms(w) for w in self.widths)
        if best_case <= plain_rate:
            # Still probe, rarely: only drafted blocks correct the draft's cost, so a cost model that is wrong
            # (a busy machine during calibration) must not switch drafting off for good.
            self.hopeless_wait += 1
            if self.hopeless_wait < MAX_PROBE_INTERVAL:
                return False
            self.hopeless_wait = 0
            return True
        lengths = match_lengths or [0]
        buckets = [self.bucket(m) for m in lengths]
        pooled = pooled_rate(self.values.values())
        if pooled is None:
            return True
        rates = [pooled if b.rate() is None else b.rate() for b in buckets]
        if sum(rates) >= len(lengths) * plain_rate:
            return True
        self.draft_schedule.waited += 1  # drafting lost: it waits (once per block) towards its next probe
        return self.draft_schedule.waited >= self.draft_schedule.interval

    def tree_shape(self, tree: TreeSettings) -> TreeSettings | None:
        """The shape of this drafted block in a call with ``tree``: one of its ``budget_ladder`` or the chain (None),
        whichever has committed the most tokens per measured millisecond; an untried one first (largest first), and
        a losing one at its next probe (module docstring)."""
        shapes = [*budget_ladder(tree), None]
        values = [self.shape_value(shape) for shape in shapes]
        untried = [shape for shape, value in zip(shapes, values) if not value.blocks]
        if untried:
            return untried[0]
        best = max(range(len(shapes)), key=lambda i: values[i].rate())
        waiting: dict[int, list[int]] = {}  # the losers, by the schedule they share (the trees share one)
        for i, value in enumerate(values):
            if i != best:
                waiting.setdefault(id(value.schedule), []).append(i)
        for members in waiting.values():
            schedule = values[members[0]].schedule
            schedule.waited += 1
            if schedule.waited >= schedule.interval:  # a probe: the best of the losers that share this schedule
                return shapes[max(members, key=lambda i: values[i].rate())]
        return shapes[best]

    def shape_value(self, shape: TreeSettings | None) -> DraftValue:
        """What blocks of ``shape`` (None: the chain) committed per measured millisecond. The trees share one probing
        schedule: where trees lose (a CPU), a probe of one tree size says enough about the others."""
        return self.shapes.setdefault(shape, DraftValue(schedule=self.tree_schedule if shape else ProbeSchedule()))

    def tree_plan(self, size: int, rows: int, tree, call_tree=None) -> BlockPlan:
        """A tree block (``tree``: its shape, one of the ``call_tree``'s ladder; default: the call's own) verifies
        its root and every node; it is expected to take what blocks of its shape took lately."""
        value = self.shapes.get(tree)
        return BlockPlan(True, size, rows, None, value.ms if value and value.blocks else 0.0, tree=tree,
                         call_tree=call_tree or tree)

    def plan(self, confidence: list[list[float]] | None, block_size: int, rows: int, call_tree=None) -> BlockPlan:
        """The width of the verify from the drafts' confidences ``[B][k]``: the one that maximises the rows'
        expected tokens together per millisecond (they share the forward). ``confidence`` None (sampled drafts):
        every draft is verified (module docstring)."""
        if confidence is None:
            return BlockPlan(True, block_size, rows, None, self.cost.drafted_ms(block_size), call_tree=call_tree)
        expected = [expected_tokens([self.calibration(c) for c in row]) for row in confidence]
        rate, width = best_width(expected, self.cost.drafted_ms, self.widths)
        return BlockPlan(True, width, rows, rate * self.cost.drafted_ms(width),
                         self.cost.drafted_ms(width), confidence, call_tree=call_tree)

    def copy_expected(self, lengths: list[list[int]]) -> list[list[float]]:
        """Each row's expected committed tokens at d = 0..k copied drafts, from the match lengths ``[B][k]`` they
        were copied at."""
        return [expected_tokens([self.copy_acceptance(m) for m in row]) for row in lengths]

    def copy_plan(self, lengths: list[list[int]], rows: int) -> BlockPlan:
        """A copy block's width from the match lengths ``[B][k]`` its drafts were copied at: the one that maximises
        the rows' expected tokens together per millisecond; width 1 (no copied draft worth verifying) is a plain
        step."""
        rate, width = best_width(self.copy_expected(lengths), self.cost.copied_ms, self.widths)
        if width == 1:
            return self.plain(rows)
        return BlockPlan(False, width, rows, rate * self.cost.copied_ms(width), self.cost.copied_ms(width), lengths,
                         copied=True)

    def plain(self, rows: int) -> BlockPlan:
        return BlockPlan(False, 1, rows, float(rows), self.cost.plain_ms())

    def observe(self, plan: BlockPlan, counts: list[int], complete: list[bool], measured_ms: float,
                match_lengths: list[int] | None, timed: bool = True) -> None:
        """Learn from one block: each verified draft's acceptance (up to the first rejection), each row's committed
        tokens in its bucket, and the block's time in the cost model (unless ``timed`` is False: the first draft
        reads the whole prompt, a time no later block repeats). ``complete[b]``: row b's count was not cut by a stop
        token or its budget, so it says how many drafts the verifier accepted."""
        if timed and plan.tree is None:  # the cost model times chains (a tree's width may pass the block)
            self.cost.observe(plan.kind, plan.width, measured_ms)
        lengths = match_lengths or [0] * len(counts)
        # A block's value is at the cost model's price (refined online, so close to what blocks take), comparable
        # with a plain step's; a tree has no cost model, and is valued at what it took.
        block_ms = measured_ms if plan.tree is not None else plan.predicted_ms
        if plan.copied:
            learn_acceptance(self.copy_acceptance, plan, counts, complete)
            return
        if not plan.drafted:
            return
        if timed and plan.call_tree is not None:  # a call with a tree: what this shape committed per measured ms
            mine = self.shape_value(plan.tree)
            rivals = [self.shape_value(shape).rate()
                      for shape in [*budget_ladder(plan.call_tree), None] if shape != plan.tree]
            # A plain mean, not a running one: what a shape costs against another is a property of the machine,
            # and one tree block in a lucky stretch of text must not flip the choice.
            self._learn(mine, sum(counts), measured_ms, max((r for r in rivals if r is not None), default=0.0),
                        weight=1.0 / (mine.blocks + 1))
        learn_acceptance(self.calibration, plan, counts, complete)
        for count, m in zip(counts, lengths):  # the whole block's time: its rows share it
            self._learn(self.bucket(m), count, block_ms, 1.0 / self.cost.plain_ms())

    @staticmethod
    def _learn(value: DraftValue, tokens: float, ms: float, rival_rate: float, weight: float = VALUE_RATE) -> None:
        """One more block in ``value``'s tokens and milliseconds (``weight``: of the new block); after a probe, its
        next probe comes sooner if it beat ``rival_rate`` (a plain step's; for a tree or a chain, the other shape's),
        later if not."""
        weight = weight if value.blocks else 1.0
        value.tokens += weight * (tokens - value.tokens)
        value.ms += weight * (ms - value.ms)
        value.blocks += 1
        schedule = value.schedule
        if schedule.waited:  # this block was a probe of a losing kind or shape
            won = value.rate() >= rival_rate
            schedule.interval = 2 if won else min(2 * schedule.interval, MAX_PROBE_INTERVAL)
            schedule.waited = 0


def make_policy(name: str, cost: CostModel | None, widths: tuple[int, ...] | None = None):
    """``"cost-aware"`` or ``"fixed"`` over ``cost`` (the generator checks the name at its boundary)."""
    return CostAware(cost, widths) if name == "cost-aware" else FixedBlocks(cost)


def is_policy(value) -> bool:
    """A policy object a caller built (e.g. ``CostAware`` over a cost model of their own), not a name."""
    return isinstance(value, (FixedBlocks, CostAware))


def pooled(summaries: list[dict | None]) -> dict | None:
    """Several calls' ``PolicyStats.summary`` as one: counts and sums added, rates recomputed from the sums (the
    bench pools a row's prompts and turns this way). None when no call reported one."""
    summaries = [s for s in summaries if s]
    if not summaries:
        return None
    total = PolicyStats()
    for summary in summaries:
        total.chosen.update({int(d): n for d, n in summary["chosen_drafts"].items()})
        for name in SUMMED:
            setattr(total, name, getattr(total, name) + summary.get(name, 0))  # tree_blocks: newer results only
    return total.summary(summaries[0]["policy"])


def describe_policy(summary: dict | None) -> str:
    """One line on what the draft policy chose: plain steps, drafted blocks and how many drafts each verified (what
    ``dels-hub generate`` and the demo print)."""
    if not summary:
        return "policy: no blocks"
    chosen = ", ".join(f"{d}: {n}" for d, n in summary["chosen_drafts"].items())
    tau = summary["tau_drafted"]
    trees = summary.get("tree_blocks")
    copies, tau_copied = summary.get("copy_blocks"), summary.get("tau_copied")
    copied = f", {copies} copy blocks (tau {tau_copied:.2f})" if copies else ""
    return (f"policy {summary['policy']}: {summary['plain_blocks']} plain steps, {summary['drafted_blocks']} drafted "
            f"blocks{f' ({trees} of them trees)' if trees else ''}{f' (tau {tau:.2f})' if tau else ''}{copied}; "
            f"drafts verified per block {{{chosen}}}")
