"""Mutation testing of the papers' equations: would a one-line wrong version of the math
still pass the fast tests?

    python tools/mutation.py                 # every group below (tens of minutes on 2 cores)
    python tools/mutation.py fes feddrs      # some groups
    python tools/mutation.py --report-only   # re-read the last run's results
    python tools/mutation.py --all           # re-check every mutant, killed ones too

A run re-checks only the mutants that are not yet killed (never checked, or survived:
new tests may kill them now); a mutant that a test killed keeps that verdict while its
function is unchanged (every mutant of a target function edited since mutmut copied it is
re-checked). ``--all`` drops that shortcut. Changing ``[tool.mutmut]``'s test selection
makes mutmut forget every verdict.

mutmut (configured in pyproject's ``[tool.mutmut]``) copies the code into ``mutants/``,
makes one-line mutants of the functions named in :data:`TARGETS` (an operator, a
comparison, a constant, an argument, a return value changed) and runs, for each, the
unit tests (pyproject's test selection, files of tests/unit: no Flower run) that execute
that function. Statements that only word an error or a log line are not mutated
(``do_not_mutate_patterns``). A mutant is
*killed* when a test fails, *survives* when all pass. The score of a group is

    killed / (mutants - equivalent)

where an *equivalent* mutant (:func:`equivalents`, ``tools/mutation_equivalents/``) computes the same thing as the
original on every input the code can receive, with one line of why. Timeouts count as
killed (the mutant broke the loop), "no tests" as survived (nothing checks it).

Exit status 0 when every group scores at least :data:`TARGET_SCORE` and every
survivor is either killed or listed as equivalent; 1 otherwise. The table goes to
stdout and to ``docs/mutation.md`` (with the survivors' diffs).
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import fnmatch
import os
import platform
import subprocess
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REPORT = REPO / "docs" / "mutation.md"
TARGET_SCORE = 0.90
KILLED = {"killed", "timeout", "caught by type check", "segfault"}
NOT_RUN = {"not checked", "skipped", "check was interrupted by user"}  # not scored; the run is incomplete
# The fast tests' environment: offline, the shared data beside the real checkout (mutmut runs
# the tests from its copy in mutants/), one intra-op thread per worker (workers run side by side).
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
       "FEDTEXT_DATA": str(REPO.parent / "shared" / "data"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# Where each paper's equations live: mutmut's names of the functions (module path, then
# x_<function> or xǁ<Class>ǁ<method>). The groups are what docs/testing.md's table reports.
TARGETS: dict[str, tuple[str, ...]] = {
    "fedbpt": (  # FedBPT: the server's CMA-ES step, σ′ (eq. (4)), the authors' reference step
        "fedtext.methods.fedbpt.cmaes.x_inv_sqrt",
        "fedtext.methods.fedbpt.cmaes.x_corrected_sigma",
        "fedtext.methods.fedbpt.cmaes.x_server_step",
        "fedtext.methods.fedbpt.cmaes.x_reference_sigma_prime",
        "fedtext.methods.fedbpt.cmaes.x_reference_local_sigma",
        "fedtext.methods.fedbpt.cmaes.xǁCMAConstantsǁfor_population",
        "fedtext.methods.fedbpt.cmaes.xǁReferenceServerESǁtell",
        "fedtext.methods.fedbpt.cmaes.xǁReferenceServerESǁweights",
        "strategies.fedbpt.xǁPaperStepǁstep",
        "strategies.fedbpt.xǁReferenceStepǁstep",
        "strategies.fedbpt.xǁFedBPTǁaggregate",
        "fedtext.methods.fedbpt.cmaes.x_carry_state",
        "fedtext.learning.blackbox.x_classic_csa_damping",
        "fedtext.learning.blackbox.x_classic_chi_n",
        "fedtext.learning.blackbox.x_new_es",
    ),
    "feddls": (  # FedDLS: the codecs (LASSO eq. (5)-(6), PCA, quantisation), token uploads, local search
        "fedtext.methods.feddls.codecs.x_encode_upload",
        "fedtext.methods.feddls.codecs.x_rebuild_prompt",
        "fedtext.methods.feddls.codecs.xǁLassoCodecǁcompress",
        "fedtext.methods.feddls.codecs.xǁLassoCodecǁencode",
        "fedtext.methods.feddls.codecs.xǁLassoCodecǁdecode",
        "fedtext.methods.feddls.codecs.xǁPCACodecǁencode",
        "fedtext.methods.feddls.codecs.xǁPCACodecǁdecode",
        "fedtext.methods.feddls.codecs.xǁQuantCodecǁencode",
        "fedtext.methods.feddls.codecs.xǁQuantCodecǁdecode",
        "fedtext.methods.feddls.codecs.x__principal_components",
        "fedtext.methods.feddls.codecs.x__centred_svd",
        "clients.feddls.x_nearest_tokens",
        "clients.feddls.x_local_search",
        "strategies.feddls.xǁFedDLSǁaggregate",
    ),
    "fes": (  # FeS: representational filter (eq. (2)), AUG-E and the Pacer, pseudo labels, co-planning
        "fedtext.methods.fes.labels.x_gold_count",
        "fedtext.methods.fes.labels.x_split_pool",
        "fedtext.methods.fes.model.x_layer_capacity",
        "fedtext.methods.fes.model.x_plan_predicate",
        "fedtext.methods.fes.model.x_planned_frozen",
        "fedtext.methods.fes.plan.x_search_depth",
        "fedtext.methods.fes.filter.x_knn_sets",
        "fedtext.methods.fes.filter.x_representational_filter",
        "fedtext.methods.fes.filter.x_votek_filter",
        "fedtext.methods.fes.filter.x_keep_count",
        "fedtext.methods.fes.pacing.xǁPaceǁlabels_round",
        "fedtext.methods.fes.pacing.xǁPaceǁtarget",
        "fedtext.methods.fes.pacing.x_aug_e",
        "fedtext.methods.fes.pacing.xǁPacerǁobserve",
        "fedtext.methods.fes.pacing.xǁPacerǁstart",
        "fedtext.methods.fes.pacing.xǁPacerǁlatency",
        "fedtext.methods.fes.pacing.x_parse_paces",
        "fedtext.methods.fes.labels.x_pseudo_target",
        "fedtext.methods.fes.labels.x_pick_top_k",
        "fedtext.methods.fes.labels.x_pick_class_quota",
        "clients.fes.xǁFewShotClientǁpseudo_label",
        "clients.fes.xǁFewShotClientǁpredict",
    ),
    "feddrs": (  # FedDRS: samplers (eqs. (6)-(7)), pseudo labels γ, distillation (eq. (8))
        "fedtext.methods.feddrs.samplers.x_wrap",
        "fedtext.methods.feddrs.samplers.x_pseudo_labels",
        "fedtext.methods.feddrs.samplers.x_descend",
        "fedtext.methods.feddrs.samplers.x_target_loss",
        "fedtext.methods.feddrs.samplers.x_adversarial_loss",
        "fedtext.methods.feddrs.samplers.x_target_samples",
        "fedtext.methods.feddrs.samplers.x_adversarial_samples",
        "fedtext.methods.feddrs.distill.x_kl_to_student",
        "fedtext.methods.feddrs.distill.x_distill_steps",
        "strategies.feddrs.xǁDistillStrategyǁaggregate",
        "strategies.feddrs.xǁDistillStrategyǁbudget",
        "strategies.feddrs.xǁFedDRSǁdistill",
    ),
    "feddpg": (  # FedDPG: G (eq. (2)-(3)), the uniform mean, FedDPGu's unlearning loss (eq. (5))
        "fedtext.methods.feddpg.model.x_make_generator",
        "fedtext.methods.feddpg.model.x_mean_embedding",
        "fedtext.methods.feddpg.model.xǁFedDPGModelǁprompts",
        "fedtext.methods.feddpg.model.xǁFedDPGModelǁlogits",
        "fedtext.methods.feddpg.unlearning.x_relabel",
        "fedtext.methods.feddpg.unlearning.x_forget_split",
        "fedtext.methods.feddpg.unlearning.x_unlearning_loss",
    ),
    "fedptuning-v2": (  # P-tuning v2: the prefix keys and values at every layer (mutmut leaves
        # decorated functions alone, so deep_prompts, a @contextmanager, is checked by hand tests only)
        "fedtext.methods.fedptuning_v2.model.xǁDeepPromptModelǁinitial_arrays",
        "fedtext.methods.fedptuning_v2.model.xǁDeepPromptModelǁlogits",
    ),
    "fedkseed": (  # FedKSeed: the central difference, the step, the per-seed sums, the accumulator, the replay
        "fedtext.methods.fedkseed.model.x_candidate_seeds",
        "fedtext.methods.fedkseed.model.x_directions",
        "fedtext.methods.fedkseed.model.x_add_direction",
        "fedtext.methods.fedkseed.model.x_projected_gradient",
        "fedtext.methods.fedkseed.model.x_zo_step",
        "fedtext.methods.fedkseed.model.x_seed_sums",
        "fedtext.methods.fedkseed.model.x_accumulate",
        "fedtext.methods.fedkseed.model.x_replay",
        "fedtext.methods.fedkseed.model.xǁFedKSeedModelǁcheck_upload",
        "strategies.fedkseed.xǁFedKSeedStrategyǁaggregate",
    ),
    "fedopt": (  # FedProx + server optimizers: Reddi et al.'s Algorithm 2 steps (FedAvgM, FedAdam, FedYogi,
        # FedAdagrad, fedavg with η) and FedProx's proximal term (μ/2)||w − w_t||² (Li et al. 2020, eq. (2))
        "fedtext.server.server_opt.xǁServerOptimizerǁstep",
        "fedtext.server.server_opt.xǁServerOptimizerǁ_sgd",
        "fedtext.server.server_opt.xǁServerOptimizerǁ_adaptive",
        "fedtext.client.local_terms.xǁProximalTermǁstart",
        "fedtext.client.local_terms.xǁProximalTermǁ__call__",
    ),
    "robust": (  # issue 58: the robust aggregators' wiring, FLAME's clip, the claim bound, fedkseed's round
        # check and the simulated attacks (the aggregators' own math is Flower's, tested equal to its strategies)
        "fedtext.trust.robust.x_combine",
        "fedtext.trust.clipping.x_norm",
        "fedtext.trust.clipping.x_difference",
        "fedtext.trust.clipping.x_update_norms",
        "fedtext.trust.robust.x_clip_updates",
        "fedtext.trust.robust.x__krum",
        "fedtext.trust.robust.x__trimmed_mean",
        "fedtext.server.strategy.xǁFedTextStrategyǁcombine",
        "fedtext.trust.clipping.x_along",
        # issue 70: the release step that runs update-clip (and every other mechanism) in order
        "fedtext.server.release.xǁUpdateClipǁapply",
        "fedtext.server.release.xǁReleaseStepǁapply",
        "fedtext.client.attacks.x_for_client",
        "fedtext.server.sampling.xǁClientSamplerǁassigned_examples",
        "fedtext.server.validation.xǁUploadValidatorǁclaim_limit",
        "fedtext.methods.fedkseed.model.x_upload_scale",
        "fedtext.methods.fedkseed.model.x_round_outliers",
    ),
    "privacy": (  # issue 59: DP-FedAvg's clip, mean over m and noise, adaptive clipping, the accountant's
        # inputs, local DP, and the strategy's release (Flower's clip/stdv arithmetic is called, not mutated)
        "fedtext.trust.clipping.x_clip",
        "fedtext.trust.privacy.x_gaussian",
        "fedtext.trust.privacy.xǁCentralDPǁnoise_params",
        "fedtext.trust.privacy.xǁCentralDPǁrelease",
        "fedtext.trust.privacy.x_local_update",
        "fedtext.trust.privacy.x_rdp_accountant",
        "fedtext.trust.privacy.x_epsilon",
        "fedtext.trust.privacy.x_sampling_rate",
        "fedtext.trust.privacy.x_spent",
        "fedtext.server.release.xǁCentralPrivacyǁapply",
        "fedtext.server.release.xǁCentralPrivacyǁdenominator",
        "fedtext.server.release.xǁSecAggSumǁapply",
        "fedtext.server.strategy.xǁFedTextStrategyǁrelease",
        "fedtext.server.strategy.xǁFedTextStrategyǁnote_privacy",
        # issue 69: Poisson cohorts (the draw, its rate, the release every round) and the PLD accountant
        "fedtext.trust.privacy.x_pld_accountant",
        "fedtext.trust.privacy.x_sampled_gaussian",
        "fedtext.trust.privacy.x_accounting",
        "fedtext.server.sampling.xǁClientSamplerǁpoisson_draw",
        "fedtext.server.sampling.xǁClientSamplerǁpoisson_rate",
        "fedtext.server.release.xǁReleaseStepǁevery_round",
    ),
    "shared": (  # the weighted means and the byte accounting every method's figures rest on; BBT's prompt
        "fedtext.trust.robust.x_weighted_mean",
        "fedtext.backbone.prompts.x_projection",
        "fedtext.backbone.prompts.x_project",
        "fedtext.common.comm.x_payload_bytes",
        "fedtext.common.comm.x_expected_bytes",
        "fedtext.server.strategy.xǁFedTextStrategyǁsimulated_seconds",
    ),
}

EQUIVALENTS = REPO / "tools" / "mutation_equivalents"  # one TOML file per group


def equivalents() -> dict[tuple[str, str], str]:
    """Equivalent mutants, ``(function, mutated line) -> why``: each group's file in
    :data:`EQUIVALENTS` lists ``[[equivalent]]`` tables with ``function`` (as in
    :data:`TARGETS`), ``line`` (the mutated line as ``mutmut show`` prints it, stripped)
    and ``why`` (one line: why it computes the same on every input the code receives).
    Keyed by the line, not mutmut's number, which shifts when the function changes."""
    out = {}
    for path in sorted(EQUIVALENTS.glob("*.toml")):
        for e in tomllib.loads(path.read_text()).get("equivalent", []):
            out[(e["function"], e["line"].strip())] = e["why"]
    return out


def group_of(name: str) -> str | None:
    """The :data:`TARGETS` group a mutant belongs to (``...x_f__mutmut_3`` -> group of ``x_f``)."""
    function = name.rsplit("__mutmut_", 1)[0]
    return next((g for g, fns in TARGETS.items() if function in fns), None)


def results() -> dict[str, str]:
    """Every mutant's status from the last run(s): ``name -> killed | survived | not checked | ...``
    (mutmut's own records under ``mutants/``, read in-process: one ``mutmut`` call per
    survivor would cost a second each)."""
    from mutmut.__main__ import walk_mutatable_files
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.stats import status_by_exit_code

    out = {}
    for path in walk_mutatable_files():
        m = SourceFileMutationData(path=path)
        m.load()
        out.update({k: status_by_exit_code[v] for k, v in m.exit_code_by_key.items()})
    return out


def _function_node(tree: ast.Module, mangled: str, orig: bool = False) -> ast.FunctionDef | None:
    """The definition of mutmut's ``x_f`` / ``xǁClassǁm`` in a parsed source file, or with
    ``orig`` the copy of the original mutmut keeps in its file (``<mangled>__mutmut_orig``)."""
    cls, name = mangled.split("ǁ")[1:] if mangled.startswith("xǁ") else (None, mangled[2:])
    name = mangled + "__mutmut_orig" if orig else name
    body = tree.body
    if cls is not None:
        found = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        body = found.body if found else []
    return next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name), None)


def changed() -> set[str]:
    """Target functions (as in :data:`TARGETS`) whose source differs from the original that
    mutmut keeps in its copy (``<name>__mutmut_orig``): mutmut regenerates their mutants and
    forgets their verdicts, so they are re-checked whole."""
    def same(a: ast.FunctionDef | None, b: ast.FunctionDef | None) -> bool:
        return (a is not None and b is not None and ast.dump(a.args) == ast.dump(b.args)
                and [ast.dump(x) for x in a.body] == [ast.dump(x) for x in b.body])

    out, trees = set(), {}
    for fn in (f for fns in TARGETS.values() for f in fns):
        module, _, mangled = fn.rpartition(".")
        path = module.replace(".", "/") + ".py"
        for root in ("", "mutants/"):
            if root + path not in trees:
                file = REPO / (root + path)
                trees[root + path] = ast.parse(file.read_text()) if file.exists() else ast.Module(body=[], type_ignores=[])
        if not same(_function_node(trees[path], mangled), _function_node(trees["mutants/" + path], mangled, orig=True)):
            out.add(fn)
    return out


def sync() -> int:
    """Copy into ``mutants/`` every test and every unmutated source file that changed since
    mutmut copied it (mutmut copies them once, when ``mutants/`` is made, and would go on
    testing with the old ones). Returns how many files were copied."""
    import filecmp
    import shutil

    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]
    mutated = set(cfg["only_mutate"])
    copied = 0
    for root in [*cfg["source_paths"], "tests/"]:
        for src in (REPO / root).rglob("*.py"):
            rel = src.relative_to(REPO).as_posix()
            dst = REPO / "mutants" / rel
            if rel in mutated or "__pycache__" in rel or (dst.exists() and filecmp.cmp(src, dst, shallow=False)):
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
            copied += 1
    return copied


def mutated_line(name: str) -> tuple[str, str]:
    """``(diff, the first added line stripped)`` of one mutant."""
    from mutmut.mutation.diff_apply import find_mutant, get_diff_for_mutant

    diff = get_diff_for_mutant(name, path=find_mutant(name).path)
    added = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    return diff, (added[0] if added else "")


def message_only(diff: str) -> bool:
    """Whether a mutant changes only lines that word an error or a log message (pyproject's
    ``do_not_mutate_patterns``, which later runs do not mutate at all): the first line of
    the statement it changes matches one of them."""
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"].get("do_not_mutate_patterns", [])
    removed = [ln[1:] for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    return bool(removed) and any(re.search(p, removed[0]) for p in patterns)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("groups", nargs="*", help=f"groups to run, of: {', '.join(TARGETS)} (default: all)")
    ap.add_argument("--report-only", action="store_true", help="read the last run's results, run nothing")
    ap.add_argument("--all", action="store_true", help="re-check killed mutants too (default: only the rest)")
    ap.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args(argv)
    unknown = [g for g in args.groups if g not in TARGETS]
    if unknown:
        ap.error(f"unknown group(s) {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    groups = args.groups or list(TARGETS)
    globs = [f"{fn}__mutmut_*" for g in groups for fn in TARGETS[g]]
    os.chdir(REPO)  # mutmut reads its config and records relative to the checkout
    if not args.report_only:
        if (REPO / "mutants").exists():
            print(f"{sync()} changed test/source files copied into mutants/")
        edited = changed()
        # every mutant of an edited target function, and every other one not yet killed
        names = globs if args.all else [g for g in globs if g.removesuffix("__mutmut_*") in edited] + [
            n for n, s in results().items() if s not in KILLED and any(fnmatch.fnmatch(n, g) for g in globs)]
        if names or not results():
            subprocess.run([str(Path(sys.executable).with_name("mutmut")), "run", "--max-children",
                            str(args.max_children), *(names or globs)], cwd=REPO, check=False, env=ENV)
    status = {n: s for n, s in results().items() if any(fnmatch.fnmatch(n, g) for g in globs)}
    if not status:
        print("no mutants found: did mutmut run? (python tools/mutation.py without --report-only)")
        return 1
    known = equivalents()
    rows, survivors, equivalent, not_run, messages = [], [], [], 0, 0
    for g in groups:
        mine = {n: s for n, s in status.items() if group_of(n) == g and s not in NOT_RUN}
        not_run += sum(1 for n, s in status.items() if group_of(n) == g and s in NOT_RUN)
        killed = equiv = survived = 0
        for n in sorted(mine):
            diff, line = mutated_line(n)
            if message_only(diff):  # not scored, killed or not: see message_only
                messages += 1
            elif mine[n] in KILLED:
                killed += 1
            elif why := known.get((n.rsplit("__mutmut_", 1)[0], line)):
                equiv += 1
                equivalent.append((g, n, line, why))
            else:
                survived += 1
                survivors.append((g, n, mine[n], diff))
        score = killed / (killed + survived) if killed + survived else None  # None: nothing checked yet
        rows.append((g, killed + equiv + survived, killed, equiv, survived, score))
    total = [sum(r[i] for r in rows) for i in (1, 2, 3, 4)]
    overall = total[1] / max(total[0] - total[2], 1)
    table = ["| group | mutants | killed | equivalent | survived | score |", "|---|---|---|---|---|---|"]
    table += [f"| {g} | {m} | {k} | {e} | {s} | {'—' if sc is None else f'{100 * sc:.1f} %'} |"
              for g, m, k, e, s, sc in rows]
    table.append(f"| **all** | {total[0]} | {total[1]} | {total[2]} | {total[3]} | **{100 * overall:.1f} %** |")
    print("\n".join(table))
    lines = [
        "# Mutation testing of the papers' equations",
        "",
        f"`python tools/mutation.py {' '.join(args.groups)}`".replace(" `", "`") + f" — {dt.date.today()}, "
        f"{os.cpu_count()} CPUs, {platform.platform()}; mutmut on the functions listed in "
        "tools/mutation.py (`TARGETS`), against the unit tests of the math (pyproject's "
        "`[tool.mutmut]` test selection, no Flower run).",
        "Score = killed / (mutants − equivalent); timeouts count as killed, mutants no test runs as survived.",
        *([f"**Incomplete run: {not_run} mutants of these groups were not checked** (not in the table)."]
          if not_run else []),
        *([f"{messages} mutants that only reword an error or log message are not counted "
           "(pyproject's `do_not_mutate_patterns`; later runs do not make them)."] if messages else []),
        "",
        *table,
        "",
        "## Equivalent mutants (not counted)",
        "",
        *([f"- `{n}` (`{line}`): {why}" for _, n, line, why in equivalent] or ["none"]),
        "",
        "## Survivors",
        "",
        *([f"### `{n}` ({s})\n\n```diff\n{diff.strip()}\n```\n" for _, n, s, diff in survivors] or ["none"]),
    ]
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"{len(survivors)} survivors, {not_run} not checked; report: {REPORT.relative_to(REPO)}")
    ok = all(r[5] is not None and r[5] >= TARGET_SCORE for r in rows) and not survivors and not not_run
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
