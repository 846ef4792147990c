"""Token trees (``generation/tree.py``, ``verify.verify_tree``, the tree block of the decode loop): the tree's shape,
its verifier, and exactness end to end, greedy and sampled, with negative controls."""

import copy

import pytest
import torch
from test_generation import chi_square_pvalue, exact_distribution, sampled_counts

from dels_hub import DeLSGenerator, Warping
from dels_hub.copy_expert import CopyChain
from dels_hub.errors import FusionScheduleError, GenerationArgumentError, UnsupportedInputError
from dels_hub.fingerprint import tokenizer_fingerprint
from dels_hub.generation.cost_model import CostModel
from dels_hub.generation.policy import CostAware, describe_policy
from dels_hub.generation.tree import TreeFusion, TreeSettings, ancestor_matrix, budget_ladder, grow_tree, tree_mask
from dels_hub.heads.ngram import NGramHead
from dels_hub.heads.ngram_head import NGramHeadConfig, NGramLocalHead
from dels_hub.verify import verify_tree

from conftest import SMALL_VOCAB, load_script, make_dflash, make_head, make_tokenizer, small_prompts


def candidate_count(k: int, budget: int, branching: int, frontier: int | None = None) -> int:
    """How many nodes ``grow_tree`` grows before keeping the best ``budget``: each expanded node keeps
    ``min(branching, budget)`` children, and each depth expands its ``frontier`` best (None: ``budget``)."""
    wide, count, expanded = min(branching, budget), 0, 1
    for _ in range(k):
        count += expanded * wide
        expanded = min(budget if frontier is None else frontier, expanded * wide)
    return count


def random_logits(rows=2, k=4, vocab=30, seed=0):
    return torch.randn((rows, k, vocab), generator=torch.Generator().manual_seed(seed)) * 3


# ---- growing the tree -------------------------------------------------------------------------------


@pytest.mark.parametrize("budget,branching,frontier", [(1, 1, None), (4, 2, None), (7, 1, None), (16, 4, 4),
                                                      (32, 4, None), (9, 3, 2), (32, 16, None)])
def test_the_tree_is_a_tree_of_the_most_probable_paths(budget, branching, frontier):
    logits = random_logits(k=4)
    tree = grow_tree(logits, torch.tensor([3, 5]), TreeSettings(budget, branching, frontier))
    rows, size = tree.tokens.shape
    assert size == min(budget, candidate_count(4, budget, branching, frontier)) + 1
    assert torch.equal(tree.tokens[:, 0], torch.tensor([3, 5])) and (tree.depths[:, 0] == 0).all()
    nodes = torch.arange(1, size)
    # Parents come first, one level up; siblings hold distinct tokens.
    assert (tree.parents[:, 1:] < nodes).all()
    assert torch.equal(tree.depths.gather(1, tree.parents)[:, 1:] + 1, tree.depths[:, 1:])
    for b in range(rows):
        pairs = {(int(p), int(t)) for p, t in zip(tree.parents[b, 1:], tree.tokens[b, 1:])}
        assert len(pairs) == size - 1
    # The kept first-level nodes are the most probable first tokens.
    for b in range(rows):
        first = tree.tokens[b, 1:][tree.depths[b, 1:] == 1]
        assert torch.equal(first.sort().values, logits[b, 0].topk(first.shape[0]).indices.sort().values)
    # The ancestor matrix follows parent links.
    assert torch.equal(tree.ancestors, ancestor_matrix(tree.parents, 4))
    assert tree.ancestors[:, :, 0].all() and tree.ancestors.diagonal(dim1=1, dim2=2).all()


@pytest.mark.parametrize("budget", [1, 5, 20, 40])
def test_unbounded_growth_keeps_the_most_probable_paths_of_all(budget):
    """With every child kept and every node expanded, the tree is exactly the ``budget`` most probable paths among
    all V + V^2 + V^3 of them (brute force)."""
    import itertools

    vocab, k = 5, 3
    logits = random_logits(rows=1, k=k, vocab=vocab, seed=budget)
    logp = logits[0].log_softmax(-1).double()
    paths = {path: sum(float(logp[d, t]) for d, t in enumerate(path))
             for depth in range(1, k + 1) for path in itertools.product(range(vocab), repeat=depth)}
    best = set(sorted(paths, key=paths.get, reverse=True)[:budget])
    tree = grow_tree(logits, torch.tensor([0]), TreeSettings(budget, vocab))
    kept = set()
    for node in range(1, tree.size):
        path, at = [], node
        while at:
            path.append(int(tree.tokens[0, at]))
            at = int(tree.parents[0, at])
        kept.add(tuple(reversed(path)))
    assert kept == best


def test_a_tree_with_branching_one_is_the_greedy_chain():
    logits = random_logits(k=5)
    tree = grow_tree(logits, torch.tensor([0, 0]), TreeSettings(5, 1))
    assert torch.equal(tree.tokens[:, 1:], logits.argmax(-1))
    assert torch.equal(tree.parents[:, 1:], torch.arange(5).expand(2, -1))


def test_a_ranking_temperature_trades_depth_for_breadth_and_keeps_each_nodes_children():
    """Sure drafts at every depth: at T = 1 a budget of 3 is the chain of first choices; a high temperature makes the
    first choice less sure than its siblings are unlikely, so the budget goes to alternatives at depth 1. Which
    children a node has is the same at any temperature (the ranking changes, not the candidates)."""
    vocab, k = 6, 3
    logits = torch.zeros((1, k, vocab))
    logits[0, :, 1] = 6.0  # token 1 first at every depth, by far
    chain = grow_tree(logits, torch.tensor([0]), TreeSettings(3, vocab))
    wide = grow_tree(logits, torch.tensor([0]), TreeSettings(3, vocab, fusion=TreeFusion(temperature=50.0)))
    assert chain.depths[0].tolist() == [0, 1, 2, 3] and chain.tokens[0, 1:].tolist() == [1, 1, 1]
    assert wide.depths[0].tolist() == [0, 1, 1, 1] and int(wide.tokens[0, 1]) == 1
    everything = [grow_tree(logits, torch.tensor([0]), TreeSettings(500, 2, fusion=TreeFusion(temperature=t))) for t in (1.0, 50.0)]
    assert [sorted(tree.tokens[0].tolist()) for tree in everything][0] == sorted(everything[1].tokens[0].tolist())


def test_a_temperature_per_depth_widens_only_its_depth():
    """Sure drafts at every depth, a budget of 3: at T = 1 the chain of first choices; a high temperature at depth 2
    alone keeps the sure first node and spends the rest on its children."""
    vocab, k = 6, 3
    logits = torch.zeros((1, k, vocab))
    logits[0, :, 1] = 6.0
    uniform = grow_tree(logits, torch.tensor([0]), TreeSettings(3, vocab, fusion=TreeFusion(temperature=(1.0, 1.0, 1.0))))
    at_two = grow_tree(logits, torch.tensor([0]), TreeSettings(3, vocab, fusion=TreeFusion(temperature=(1.0, 50.0, 50.0))))
    assert uniform.depths[0].tolist() == [0, 1, 2, 3]
    assert at_two.depths[0].tolist() == [0, 1, 2, 2] and at_two.parents[0].tolist() == [0, 0, 1, 1]


def test_a_trees_own_fusion_weights_replace_the_chains():
    """A ``TreeFusion``'s alpha and beta (a head's ``tree_fusion``) rank the tree in place of the chain's weights: the
    same tree as the chain's weights set to them, and a different one from the chain's own."""
    tokenizer = make_tokenizer(SMALL_VOCAB - 2)
    head = make_head(tokenizer, vocab=SMALL_VOCAB - 2, alpha=0.8, beta=0.3)
    logits = random_logits(rows=1, k=3, vocab=SMALL_VOCAB, seed=4)
    anchor, prior = torch.tensor([2]), head.log_prior()
    chain_alpha, chain_beta = torch.zeros(3), torch.zeros(3)
    own = grow_tree(logits, anchor, TreeSettings(8, 3, fusion=TreeFusion((4.0,) * 3, (0.3,) * 3)), head, prior,
                    chain_alpha, chain_beta)
    same = grow_tree(logits, anchor, TreeSettings(8, 3), head, prior, torch.full((3,), 4.0), torch.full((3,), 0.3))
    chains = grow_tree(logits, anchor, TreeSettings(8, 3), head, prior, chain_alpha, chain_beta)
    assert torch.equal(own.tokens, same.tokens) and torch.equal(own.parents, same.parents)
    assert not torch.equal(own.tokens, chains.tokens)


def test_a_heads_tree_fusion_is_read_and_checked():
    config = NGramHeadConfig(alpha=0.7, beta=0.5, pure_prefix_len=1,
                             tree_fusion={"alpha": 1.0, "temperature": [1.2, 1.4, 1.6, 9.0]})
    fusion = TreeFusion.of_head(config, config.pure_prefix_len, 3)
    assert fusion == TreeFusion(alpha=(0.0, 1.0, 1.0), beta=None, temperature=(1.2, 1.4, 1.6))  # pure prefix: 0
    assert TreeFusion.of_head(NGramHeadConfig(), 1, 3) == TreeFusion()  # none: the chain's at temperature 1
    assert TreeFusion.of_head(None, 0, 3) == TreeFusion()
    for bad, message in [({"alpha": 1.0, "gamma": 2.0}, "keys among alpha, beta and temperature.*gamma"),
                         ({"temperature": 0.0}, "temperature must be a float > 0.*got 0.0"),
                         ({"temperature": [1.5, 1.5]}, r"one per depth \(at least 3\), got \[1.5, 1.5\]"),
                         ({"temperature": "hot"}, "got 'hot'"),
                         ({"beta": [0.5]}, "beta schedule has 1 values")]:
        with pytest.raises(FusionScheduleError, match=message):
            TreeFusion.of_head(NGramHeadConfig(tree_fusion=bad), 0, 3)


def test_branches_read_their_own_prefix_with_the_head_and_the_copy_expert():
    """DFlash's logits are the same on every branch; with the head or the copy vote, siblings' children differ."""
    tokenizer = make_tokenizer(SMALL_VOCAB - 2)
    head = make_head(tokenizer, vocab=SMALL_VOCAB - 2, alpha=0.8, beta=0.3)
    logits = random_logits(rows=1, k=3, vocab=SMALL_VOCAB, seed=4)
    anchor = torch.tensor([2])
    alpha, beta = torch.full((3,), 4.0), torch.full((3,), 0.3)
    plain = grow_tree(logits, anchor, TreeSettings(100, 3))  # every candidate kept
    fused = grow_tree(logits, anchor, TreeSettings(100, 3), head, head.log_prior(), alpha, beta)

    def children(tree, depth):
        kids = {}
        for node in range(1, tree.size):
            if tree.depths[0, node] == depth:
                kids.setdefault(int(tree.parents[0, node]), []).append(int(tree.tokens[0, node]))
        return [sorted(v) for v in kids.values()]

    assert all(kids == children(plain, 2)[0] for kids in children(plain, 2))  # DFlash alone: the same children
    assert len({tuple(kids) for kids in children(fused, 2)}) > 1
    text = torch.tensor([[2, 7, 9, 2, 7, 9, 1, 2]])  # "2 7 9" recurs: after 2 -> 7, after 2 7 -> 9
    copy = CopyChain(text, 7, torch.tensor([0.0, 30.0, 30.0]))
    copied = grow_tree(logits, anchor, TreeSettings(2, 3), copy=copy)  # room for the two best nodes only
    assert copied.tokens[0, 1:].tolist() == [7, 9] and copied.parents[0].tolist() == [0, 0, 1], \
        "the copy vote leads its branch down the repeated text"


def test_tree_mask_shows_each_node_its_ancestors_and_the_committed_context():
    parents = torch.tensor([[0, 0, 0, 1, 2]])
    ancestors = ancestor_matrix(parents, 2)
    mask = tree_mask(torch.arange(12), torch.tensor([4]), ancestors, torch.float32, "sdpa")[0, 0]
    assert mask[:, :4].all() and not mask[:, 9:].any()
    expected = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]])
    assert torch.equal(mask[:, 4:9].long(), expected)


# ---- verifying it -------------------------------------------------------------------------------------


def test_verify_tree_follows_the_targets_choices_down_one_branch():
    #        root(5)
    #       /      \
    #     1: 7    2: 8
    #     |        |  \
    #   3: 4     4: 6  5: 9
    tokens = torch.tensor([[5, 7, 8, 4, 6, 9]])
    parents = torch.tensor([[0, 0, 0, 1, 2, 2]])
    depths = torch.tensor([[0, 1, 1, 2, 2, 2]])
    ancestors = ancestor_matrix(parents, 2)
    # The target picks 8 after the root, 9 after node 2, then 3 after node 5.
    choices = torch.tensor([[8, 0, 9, 0, 0, 3]])
    out, n, path = verify_tree(choices, tokens, parents, depths, ancestors, k=3)
    assert int(n) == 2 and out[0, :3].tolist() == [8, 9, 3] and path[0, :3].tolist() == [0, 2, 5]
    # Nothing matches: the target's own token after the root.
    out, n, path = verify_tree(torch.tensor([[1, 0, 0, 0, 0, 0]]), tokens, parents, depths, ancestors, k=3)
    assert int(n) == 0 and int(out[0, 0]) == 1 and path[0].tolist() == [0, 0, 0, 0]
    # A child whose parent was rejected is not accepted even if it matches (node 3's parent 1 is not the choice).
    out, n, _ = verify_tree(torch.tensor([[8, 4, 1, 0, 0, 0]]), tokens, parents, depths, ancestors, k=3)
    assert int(n) == 1 and out[0, :2].tolist() == [8, 1]


# ---- end to end ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("budget,branching", [(3, 2), (8, 4), (16, 4)])
@pytest.mark.parametrize("with_head", [None, "head", "tree fusion"])
@pytest.mark.parametrize("copy_ngram", [0, 2])
def test_tree_greedy_equals_target_greedy(small, budget, branching, with_head, copy_ngram):
    target = small["qwen3"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    head = small["head"] if with_head else None
    if with_head == "tree fusion":  # the head's trees ranked by weights of their own, a temperature per depth
        head = copy.deepcopy(head)
        head.config.tree_fusion = {"alpha": 2.0, "beta": 0.1, "temperature": [1.5, 0.7, 2.0]}
    generator = DeLSGenerator(target, drafter, head, small["tokenizer"],
                              copy_ngram=copy_ngram, tree_budget=budget, tree_branching=branching, policy="fixed")
    assert generator.tree.fusion.temperature == ((1.5, 0.7, 2.0) if with_head == "tree fusion" else 1.0)
    chain = DeLSGenerator(target, drafter, head, small["tokenizer"], copy_ngram=copy_ngram, policy="fixed")
    tree_lengths, chain_lengths = [], []
    for input_ids in small_prompts(count=4):
        expected = target.generate(input_ids, max_new_tokens=30, do_sample=False)
        out = generator.generate(input_ids, max_new_tokens=30, return_dict_in_generate=True)
        assert torch.equal(out.sequences, expected)
        # Every block verified a whole tree (the fixed policy), its size capped by what the tree could grow.
        assert list(out.policy_summary["chosen_drafts"]) == [min(budget, candidate_count(3, budget, branching))]
        tree_lengths += out.acceptance_lengths
        chain_lengths += chain.generate(input_ids, max_new_tokens=30, return_dict_in_generate=True).acceptance_lengths
    assert max(tree_lengths) <= 4
    assert sum(tree_lengths) / len(tree_lengths) >= sum(chain_lengths) / len(chain_lengths) - 0.5


def test_tree_greedy_equals_target_greedy_for_a_left_padded_batch(small):
    target = small["llama"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    generator = DeLSGenerator(target, drafter, small["head"], small["tokenizer"], copy_ngram=2, tree_budget=8,
                              policy="fixed")
    prompts = [prompt[:, :length] for prompt, length in zip(small_prompts(count=3, length=7), (7, 4, 6))]
    width = max(p.shape[1] for p in prompts)
    input_ids = torch.stack([torch.cat([torch.zeros(width - p.shape[1], dtype=torch.long), p[0]]) for p in prompts])
    mask = torch.stack([torch.cat([torch.zeros(width - p.shape[1]), torch.ones(p.shape[1])]) for p in prompts]).long()
    out = generator.generate(input_ids, attention_mask=mask, max_new_tokens=25)
    for row, prompt in enumerate(prompts):
        expected = target.generate(prompt, max_new_tokens=25, do_sample=False)[0, prompt.shape[1]:]
        assert torch.equal(out[row, width:width + expected.shape[0]], expected)


@pytest.mark.parametrize("mixed", [False, True], ids=["fixed", "cost-aware"])
def test_a_broken_tree_cache_is_caught(small, monkeypatch, mixed):
    """Negative control: without moving the accepted path to the slots of its positions, the target reads the wrong
    keys at the next block, and the greedy check fails (also where trees and chains alternate)."""
    from dels_hub.generation.caches import StaticSlotCache

    monkeypatch.setattr(StaticSlotCache, "move", lambda self, sources, destinations: None)
    target = small["qwen3"]
    generator = DeLSGenerator(target, make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5), small["head"],
                              small["tokenizer"], tree_budget=8, policy="fixed")
    mismatches = 0
    for input_ids in small_prompts(count=4):
        expected = target.generate(input_ids, max_new_tokens=30, do_sample=False)
        policy = shape_policy() if mixed else "fixed"
        mismatches += not torch.equal(generator.generate(input_ids, max_new_tokens=30, policy=policy), expected)
    assert mismatches > 0


def test_sampled_tree_text_equals_plain_sampling_for_a_seed(small):
    """Top-token trees at T > 0 keep the target's keyed draws: a seed gives the text of plain decoding."""
    target = small["qwen3"]
    generator = DeLSGenerator(target, make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5), small["head"],
                              small["tokenizer"], copy_ngram=2)
    for seed, input_ids in enumerate(small_prompts(count=3)):
        settings = dict(max_new_tokens=20, do_sample=True, temperature=0.8, top_k=0, seed=seed)
        plain = generator.generate(input_ids, block_size=1, **settings)
        assert torch.equal(generator.generate(input_ids, tree_budget=8, **settings), plain)


def accept_any_child(choices, tokens, parents, depths, ancestors, k):
    """A biased tree verifier (negative control): accepts the first child of the root and of each accepted node, as
    if it had matched, so the output follows the drafter, not the target."""
    fake = choices.clone()
    for node in range(tokens.shape[-1] - 1, 0, -1):  # the first child (lowest index) of each parent wins
        fake.scatter_(-1, parents[..., node : node + 1], tokens[..., node : node + 1])
    return verify_tree(fake, tokens, parents, depths, ancestors, k)


@pytest.mark.parametrize("biased", [False, True])
def test_sampled_trees_follow_the_target_distribution(small, monkeypatch, biased):
    target = small["qwen3"]
    if biased:
        monkeypatch.setattr("dels_hub.generation.tree_block.verify_tree", accept_any_child)
    generator = DeLSGenerator(target, make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"],
                              small["tokenizer"], tree_budget=6, tree_branching=2, policy="fixed")
    input_ids, new_tokens, samples = small_prompts(count=1)[0], 3, 2000
    expected = exact_distribution(target, input_ids, Warping(1.0, 0, 1.0), new_tokens)
    counts = sampled_counts(generator, input_ids, samples, new_tokens, temperature=1.0, top_k=0, top_p=1.0)
    pvalue = chi_square_pvalue(counts, expected, samples)
    assert (pvalue < 1e-6) if biased else (pvalue > 1e-3)


def test_tree_arguments_are_checked_before_any_work(small):
    target = small["qwen3"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB)
    with pytest.raises(GenerationArgumentError, match="tree_budget must be an integer >= 1.*got -2"):
        DeLSGenerator(target, drafter, None, small["tokenizer"], tree_budget=-2)
    with pytest.raises(GenerationArgumentError, match="tree_branching must be an integer >= 1.*got 0"):
        DeLSGenerator(target, drafter, None, small["tokenizer"], tree_budget=4, tree_branching=0)
    hot = copy.deepcopy(small["head"])
    hot.config.tree_fusion = {"temperature": -1.0}
    with pytest.raises(FusionScheduleError, match="tree_fusion temperature must be a float > 0.*got -1.0"):
        DeLSGenerator(target, drafter, hot, small["tokenizer"], tree_budget=4)
    generator = DeLSGenerator(target, drafter, None, small["tokenizer"], tree_budget=4)
    input_ids = small_prompts(count=1)[0]
    with pytest.raises(UnsupportedInputError, match="draft_mode='top'"):
        generator.generate(input_ids, do_sample=True, draft_mode="sampled")
    with pytest.raises(UnsupportedInputError, match="static cache"):
        generator.generate(input_ids, fast=False)
    # tree_budget=0 turns a generator's tree off for one call.
    assert torch.equal(generator.generate(input_ids, tree_budget=0, max_new_tokens=8),
                       target.generate(input_ids, max_new_tokens=8, do_sample=False))


@pytest.mark.parametrize("sampling", [{"do_sample": False}, {"do_sample": True, "temperature": 0.7}],
                         ids=["greedy", "T0.7"])
def test_the_replay_of_trees_gives_the_loops_acceptance(small, sampling):
    """The replay that chose the tree shape (``scripts/tree_replay.py``) accepts what the loop accepts, block by block,
    for chains and trees, with and without the head, and with an n-gram head that reads the tokens before its block;
    at T > 0 too, replayed on the loop's keyed sample of the target alone (``block_size=1``) with the same seed."""
    target, head = small["qwen3"], small["head"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    prompts = small_prompts(count=3)
    alone = DeLSGenerator(target, drafter, None, small["tokenizer"], policy="fixed")
    sequences = [(alone.generate(ids, block_size=1, max_new_tokens=24, seed=index, **sampling), ids.shape[1])
                 for index, ids in enumerate(prompts)]
    script = load_script("tree_replay")
    # Counted on the continuations themselves and weighted far above DFlash: its drafts are its own.
    vocab = head.config.vocab_size  # the target's padding ids past it are never sampled: clamped, as a head reads them
    counted = NGramHead.fit([(text[0].clamp_max(vocab - 1), torch.ones(text.shape[1], dtype=torch.bool))
                             for text, _ in sequences], vocab, 4)
    ngram = {reads: NGramLocalHead.from_ngram(counted, top_k=4, min_count=1, alpha=4.0, beta=0.0, pure_prefix_len=0,
                                              context_tokens=reads,
                                              tokenizer_fingerprint=tokenizer_fingerprint(small["tokenizer"]))
             for reads in (0, 2)}
    tuned = copy.deepcopy(ngram[2])  # its trees ranked by a fusion of their own, as the loop ranks them
    tuned.config.tree_fusion = {"alpha": 1.0, "beta": 0.5, "temperature": [3.0, 0.5, 2.0]}
    heads = {"DFlash": None, "head": head, "primed": ngram[2], "tree fusion": tuned}
    taus = script.replay(target, drafter, sequences, heads, ["chain", "6:3"], None)
    assert taus["tree fusion"]["6:3"] != taus["primed"]["6:3"]  # the tree's own fusion changes what it accepts
    assert taus["tree fusion"]["chain"] == taus["primed"]["chain"]  # and not the chain's
    # The context it reads changes its drafts, so a replay that ignored it would not match the loop below.
    assert script.replay(target, drafter, sequences, {"block alone": ngram[0]}, ["chain"], None)["block alone"] != \
        taus["primed"]
    for label, part in heads.items():
        generator = DeLSGenerator(target, drafter, part, small["tokenizer"], policy="fixed")
        for shape, tree in (("chain", {}), ("6:3", {"tree_budget": 6, "tree_branching": 3})):
            loop = [generator.generate(ids, max_new_tokens=24, return_dict_in_generate=True, seed=index, **tree,
                                       **sampling).tau for index, ids in enumerate(prompts)]
            assert taus[label][shape] == pytest.approx(loop), (label, shape)
    gains = script.paired_gains(taus)
    difference = [mine - theirs for mine, theirs in zip(taus["head"]["6:3"], taus["DFlash"]["6:3"])]
    assert gains["head"]["6:3"]["tau_difference"]["mean"] == pytest.approx(sum(difference) / len(difference))
    if sampling["do_sample"]:  # negative control: the greedy text is not what the sampling loop commits
        greedy = [(target.generate(ids, max_new_tokens=24, do_sample=False), ids.shape[1]) for ids in prompts]
        assert script.replay(target, drafter, greedy, {"DFlash": None}, ["chain"], None)["DFlash"]["chain"] != \
            pytest.approx([alone.generate(ids, max_new_tokens=24, return_dict_in_generate=True, seed=index,
                                          **sampling).tau for index, ids in enumerate(prompts)])


# -- the cost-aware choice between the tree and the chain --------------------------------------------------------


class DraftsEveryBlock(CostAware):
    """The cost-aware policy with every block drafted (no plain steps, no copy blocks): what is left to choose is the
    shape."""

    def block_kind(self, copy_lengths, can_copy):
        return "drafted"


def shape_policy() -> CostAware:
    """A cost-aware policy that drafts every block, over a table where drafting always pays. Blocks' timings refine
    the table (a tree block must not reach it: its width passes the block)."""
    return DraftsEveryBlock(CostModel(key={"test": True}, verify_ms=[1.0] * 4, draft_ms=0.0))


@pytest.mark.parametrize("tree_pays", [False, True])
def test_the_cost_aware_policy_drafts_the_shape_that_commits_more_per_millisecond(tree_pays):
    tree, policy = TreeSettings(8, 4), shape_policy()
    rate = {True: (3.0 if not tree_pays else 9.0, 30.0), False: (2.0, 10.0)}  # tokens, ms: 0.1 or 0.3 against 0.2

    def block(is_tree):
        plan = policy.tree_plan(9, 1, tree) if is_tree else policy.plan([[0.9, 0.9, 0.9]], 4, 1, tree)
        tokens, ms = rate[is_tree]
        policy.observe(plan, [int(tokens)], [True], ms, None)

    assert policy.tree_shape(tree) == tree  # an untried shape first: the tree, then the chain
    block(True)
    assert policy.tree_shape(tree) is None
    block(False)
    choices = []
    for _ in range(14):
        choices.append(policy.tree_shape(tree) == tree)
        block(choices[-1])
    # The winner drafts; the loser is probed after 2, then 4, then 8 blocks while it keeps losing.
    loser_turns = [i for i, use in enumerate(choices) if use != tree_pays]
    assert loser_turns == [1, 5, 13]
    assert policy.cost.observed["drafted"] == choices.count(False) + 1  # chains only reach the cost model


def test_the_cost_aware_policy_chooses_the_budget_among_halves_of_the_calls():
    """A call with 32 nodes: the policy tries trees of 32, 16 and 8 nodes and the chain, then drafts the shape that
    commits the most per millisecond (here 16: half the time of 32 for most of its tokens), probing the others."""
    tree, policy = TreeSettings(32, 4), shape_policy()
    assert budget_ladder(tree) == [tree, TreeSettings(16, 4), TreeSettings(8, 4)]
    assert budget_ladder(TreeSettings(12, 4)) == [TreeSettings(12, 4)]
    outcome = {32: (5, 40.0), 16: (4, 20.0), 8: (3, 20.0), None: (2, 15.0)}  # tokens, ms: 16 wins at 0.2 per ms
    shapes = []
    for _ in range(40):
        shape = policy.tree_shape(tree)
        shapes.append(None if shape is None else shape.budget)
        tokens, ms = outcome[shapes[-1]]
        plan = (policy.tree_plan(shape.budget + 1, 1, shape, tree) if shape is not None
                else policy.plan([[0.9, 0.9, 0.9]], 4, 1, tree))
        policy.observe(plan, [tokens], [True], ms, None)
    assert shapes[:4] == [32, 16, 8, None]  # each tried once, largest first
    # The chain and the best losing tree (8: 0.15 per ms against 32's 0.125) are probed, less and less often: the
    # trees share one schedule, so a losing tree size costs no probes of its own.
    assert {8, None} <= set(shapes[4:]) and 32 not in shapes[4:]
    assert shapes[4:22].count(16) < shapes[22:].count(16) and shapes[22:].count(16) >= 14


def test_cost_aware_trees_mix_trees_and_chains_and_stay_exact(small):
    target = small["qwen3"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    generator = DeLSGenerator(target, drafter, small["head"], small["tokenizer"], copy_ngram=2, tree_budget=8)
    for input_ids in small_prompts(count=3):
        expected = target.generate(input_ids, max_new_tokens=30, do_sample=False)
        out = generator.generate(input_ids, max_new_tokens=30, return_dict_in_generate=True, policy=shape_policy())
        assert torch.equal(out.sequences, expected)
        summary = out.policy_summary
        assert 0 < summary["tree_blocks"] < summary["drafted_blocks"]  # both shapes ran in the call
    assert "trees" in describe_policy(summary)


def test_cost_aware_trees_stay_exact_for_a_left_padded_batch_and_at_t_above_0(small):
    target = small["llama"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    generator = DeLSGenerator(target, drafter, small["head"], small["tokenizer"], copy_ngram=2, tree_budget=8)
    prompts = [prompt[:, :length] for prompt, length in zip(small_prompts(count=3, length=7), (7, 4, 6))]
    width = max(p.shape[1] for p in prompts)
    input_ids = torch.stack([torch.cat([torch.zeros(width - p.shape[1], dtype=torch.long), p[0]]) for p in prompts])
    mask = torch.stack([torch.cat([torch.zeros(width - p.shape[1]), torch.ones(p.shape[1])]) for p in prompts]).long()
    out = generator.generate(input_ids, attention_mask=mask, max_new_tokens=25, return_dict_in_generate=True,
                             policy=shape_policy())
    assert 0 < out.policy_summary["tree_blocks"] < out.policy_summary["drafted_blocks"]
    for row, prompt in enumerate(prompts):
        expected = target.generate(prompt, max_new_tokens=25, do_sample=False)[0, prompt.shape[1]:]
        assert torch.equal(out.sequences[row, width:width + expected.shape[0]], expected)
    # At T > 0 a seed gives the text of plain sampling, whichever shape each block drafted.
    for seed, prompt in enumerate(prompts):
        settings = dict(max_new_tokens=20, do_sample=True, temperature=0.8, top_k=0, seed=seed)
        assert torch.equal(generator.generate(prompt, policy=shape_policy(), **settings),
                           generator.generate(prompt, block_size=1, **settings))


def test_compiled_trees_are_exact_with_a_graph_per_tree_size(small):
    """``generator.compile = True``: the tree's verify is a graph of its own per tree size (inductor on CPU, CUDA
    graphs on CUDA), its growth eager. Greedy gives the target's tokens with the eager trees' acceptance, and another
    prompt compiles nothing new; with the policy mixing trees and chains, each shape keeps its graphs and the tokens
    stay the target's; at T > 0 a seed gives the text of plain sampling."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # no graph compiled before this test is reused; its counters are global, so count from here
    graphs_before, breaks_before = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    target = small["qwen3"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)

    def trees():
        return DeLSGenerator(target, drafter, small["head"], small["tokenizer"], copy_ngram=2, tree_budget=16,
                             tree_branching=4, policy="fixed")

    eager, compiled = trees(), trees()
    compiled.compile = True
    graphs = []
    for input_ids in small_prompts(count=2):
        expected = target.generate(input_ids, max_new_tokens=30, do_sample=False)
        out = compiled.generate(input_ids, max_new_tokens=30, return_dict_in_generate=True)
        assert torch.equal(out.sequences, expected)
        assert out.acceptance_lengths == eager.generate(input_ids, max_new_tokens=30,
                                                        return_dict_in_generate=True).acceptance_lengths
        graphs.append(counters["stats"]["unique_graphs"] - graphs_before)
    assert graphs == [1, 1]  # one tree size under the fixed policy, and no new graph for the second prompt
    assert sum(counters["graph_break"].values()) == breaks_before

    mixed = DeLSGenerator(target, drafter, small["head"], small["tokenizer"], copy_ngram=2, tree_budget=8)
    mixed.compile = True
    tree_blocks, drafted_blocks = 0, 0
    for input_ids in small_prompts(count=3):
        expected = target.generate(input_ids, max_new_tokens=30, do_sample=False)
        out = mixed.generate(input_ids, max_new_tokens=30, return_dict_in_generate=True, policy=shape_policy())
        assert torch.equal(out.sequences, expected)
        tree_blocks += out.policy_summary["tree_blocks"]
        drafted_blocks += out.policy_summary["drafted_blocks"]
    assert 0 < tree_blocks < drafted_blocks  # both shapes ran
    # At most: the first call's tree of 16 nodes, the chain's widths 1..4, the draft step and the tree of 8 nodes.
    assert counters["stats"]["unique_graphs"] - graphs_before <= 1 + 4 + 1 + 1
    for seed, input_ids in enumerate(small_prompts(count=2)):
        settings = dict(max_new_tokens=20, do_sample=True, temperature=0.8, top_k=0, seed=seed)
        assert torch.equal(compiled.generate(input_ids, **settings), eager.generate(input_ids, block_size=1, **settings))
