"""Hyperparameter search on validation, the RecBole way (``run_hyper.py``, docs/tune.md): a trial scores the mean best
validation score over its split seeds (test shown, never used to choose), in an Optuna study that resumes and that
several processes share."""

import hashlib
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState
from recbole.trainer.hyper_tuning import HyperTuning
from recbole.utils import dict2str
from sqlalchemy.exc import IntegrityError, OperationalError  # comes with optuna

from recbole_fbsm.config.cold_start_config import ColdStartConfig, tuned_properties_file
from recbole_fbsm.config.paths import LOCAL_PROPERTIES_DIR
from recbole_fbsm.config.schema import setting
from recbole_fbsm.config.settings import check_user_settings, convert_value, precheck
from recbole_fbsm.errors import ColdStartError, exit_status
from recbole_fbsm.experiments import search_space
from recbole_fbsm.experiments.compare import QUIET_DEFAULTS, run_pair
from recbole_fbsm.storage.fingerprint import data_fingerprint
from recbole_fbsm.storage.run_records import HYBRID_GROUPS, settings_of
from recbole_fbsm.storage.safe_files import write_atomic
from recbole_fbsm.training.trainer import validation_callback

# the heartbeat and its retry callback are "experimental" in Optuna 4 and 5; they are what a shared study needs
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

params_text = HyperTuning.params2str  # RecBole's "name:value, name:value"
# settings that do not change a trial's result: processes may differ in them and still share a study
NEUTRAL_KEYS = {"torch_threads", "state", "show_progress", "checkpoint_dir"}
SEED_STRIDE = 100_000  # pruner steps: validation n of the k-th seed is step k * SEED_STRIDE + n
DEFAULT_MAX_EVALS = 100  # RecBole's, for tpe and random (recbole_fbsm.cli.experiments' --max_evals help says it)
# a running trial records a heartbeat every HEARTBEAT_S; one silent for HEARTBEAT_GRACE_S (its process died) is failed
# by Optuna and queued again, its grid point kept (RetryHeartbeatStaleTrialCallback, Optuna's RetryFailedTrialCallback)
HEARTBEAT_S, HEARTBEAT_GRACE_S = 60, 600
RETRY = optuna.storages.RetryHeartbeatStaleTrialCallback()
DONE = (TrialState.COMPLETE, TrialState.PRUNED)
# a trial's results in the output file, means over its seeds: RecBole's two, then the hybrid scenario's groups
RESULTS = {"best_valid_result": "Valid result", "test_result": "Test result"} | {
    key: f"{key.split('_')[0].capitalize()} result, {key.split('_')[-1]} items" for key in HYBRID_GROUPS
}


class TrialFailed(Exception):
    """A trial that raised (recorded in the study; the search goes on)."""


class Search:
    """What a search runs: the model, the data, the space, the seeds and the fixed settings."""

    def __init__(self, model, dataset, params, seeds=(2020,), config_files=None, overrides=None, source="params file"):
        self.model, self.dataset, self.params, self.seeds = model, dataset, list(params), [int(s) for s in seeds]
        self.config_files, self.overrides = list(config_files or []) or None, dict(overrides or {})
        clash = sorted(set(self.overrides) & {p.name for p in self.params})
        if clash:
            raise ColdStartError(f"--{clash[0]}=... is also a searched parameter of the params file: give it one place")
        precheck(model, self.config_files, self.overrides)  # the model's name, files and --key=value settings
        for param in self.params:  # every searched value a setting accepts (a range: its bounds), before any trial
            bounds = param.distribution()
            for value in param.values or (bounds.low, bounds.high):
                check_user_settings(config_dict={param.name: value}, source=source)
        config = ColdStartConfig(model, dataset, self.config_files, {**QUIET_DEFAULTS, **self.overrides})
        self.valid_metric, self.bigger = str(config["valid_metric"]).lower(), bool(config["valid_metric_bigger"])
        self.data_sha256 = data_fingerprint(config)["sha256"]  # the files its trials read
        # the hybrid scenario: trials are chosen on the valid metric of this group (all items unless told otherwise)
        hybrid = str(setting(config, "cold_start_scenario")).lower() == "hybrid"
        self.valid_group = str(setting(config, "hybrid_valid_group")).lower() if hybrid else None

    def signature(self):
        """Everything that makes two trials comparable (the data's content and the release too): stored in the
        study, checked when it is reused, hashed into the default study name."""
        overrides = {k: v for k, v in self.overrides.items() if k not in NEUTRAL_KEYS}
        signature = {
            "model": self.model,
            "seeds": self.seeds,
            "search_space": [p.line() for p in self.params],
            "valid_metric": self.valid_metric,
            "bigger": self.bigger,
            **settings_of(self.dataset, self.config_files, overrides, self.data_sha256),
        }
        return json.loads(json.dumps(signature, default=str))

    def default_study_name(self):
        digest = hashlib.sha256(json.dumps(self.signature(), sort_keys=True).encode()).hexdigest()[:8]
        return f"{self.model}-{Path(str(self.dataset)).name}-{digest}"


def make_storage(url, attempts=5):
    """Optuna's database storage: sqlite waits for its lock, a heartbeat shows every process a dead trial (failed and
    queued again), and the loser of a race to create the tables tries again."""
    folder = Path(url.removeprefix("sqlite:///").split("?")[0]).parent
    if url.startswith("sqlite:///") and not folder.is_dir():  # else sqlite's "unable to open", after the retries
        raise ColdStartError(f"--storage {url!r}: folder {folder} does not exist")
    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs={"connect_args": {"timeout": 300}} if url.startswith("sqlite") else {},
                heartbeat_interval=HEARTBEAT_S,
                grace_period=HEARTBEAT_GRACE_S,
                heartbeat_stale_trial_callback=RETRY,
            )
        except Exception as error:  # sqlalchemy's many errors for a bad URL, a missing driver, a race
            if attempt + 1 == attempts or not isinstance(error, (OperationalError, IntegrityError)):
                raise ColdStartError(f"--storage {url!r}: cannot open it ({type(error).__name__}: {error})") from None
            time.sleep(0.5 + attempt)


def open_study(search, storage, study_name, sampler, pruner):
    """The study of that name, made for ``search``'s settings (``Search.signature``) or refused."""
    direction = "maximize" if search.bigger else "minimize"
    study = optuna.create_study(
        storage=storage, study_name=study_name, sampler=sampler, pruner=pruner, direction=direction, load_if_exists=True
    )
    wanted = search.signature()
    if "settings" not in study.user_attrs:  # Optuna keeps the first of processes writing it at the same moment
        study.set_user_attr("settings", wanted)
    stored = study.user_attrs["settings"]
    changed = sorted(key for key in stored | wanted if stored.get(key) != wanted.get(key))
    if changed:
        raise ColdStartError(
            f"study {study_name!r} in the storage was made with other settings ({', '.join(changed)}):"
            " give another --study_name, or leave it out for a name of its own"
        )
    return study


class Objective:
    """One trial: the sampled settings, run once per seed; the pruner is fed after every validation."""

    def __init__(self, search, log=print):
        self.search, self.log = search, log

    def __call__(self, trial):
        stored = {p.name: suggest(trial, p.name, p.distribution()) for p in self.search.params}
        settings = search_space.settings_of_trial(self.search.params, stored)
        shown, runs = f"[trial {trial.number}] {params_text(settings)}", []
        try:
            for k, seed in enumerate(self.search.seeds):
                runs.append(self.run_seed(trial, k, seed, settings, runs))
                trial.set_user_attr("runs", runs)
        except optuna.TrialPruned:
            self.log(f"{shown}: pruned")
            raise
        except KeyboardInterrupt:  # Optuna fails the trial: a copy, its grid point kept, waits for the resumed search
            RETRY(trial.study, trial.study.get_trials(deepcopy=False)[trial.number])
            raise
        except ColdStartError:
            raise
        except Exception as error:
            trial.set_user_attr("error", f"{type(error).__name__}: {error}")
            self.log(f"{shown}: FAILED {type(error).__name__}: {error}")
            raise TrialFailed(str(error)) from error
        value = statistics.mean(r["best_valid_score"] for r in runs)
        test = statistics.mean(r["test_result"].get(self.search.valid_metric, float("nan")) for r in runs)
        seconds = sum(r["seconds"] for r in runs)
        self.log(f"{shown}: valid {self.search.valid_metric} {value:.4f} (test {test:.4f}, {seconds:.0f} s)")
        return value

    def run_seed(self, trial, k, seed, settings, done):
        """The run of one split seed; each validation reports the mean best score so far over the seeds to the
        pruner."""
        done_sum, scores, pick = sum(r["best_valid_score"] for r in done), [], max if self.search.bigger else min

        def report(score, result):
            scores.append(float(score))
            trial.report((done_sum + pick(scores)) / (k + 1), k * SEED_STRIDE + len(scores) - 1)
            if trial.should_prune():
                raise optuna.TrialPruned(f"validation {len(scores)} of seed {seed}")

        search, overrides = self.search, {**self.search.overrides, **settings}
        # the scratch folder only to reload the best epoch for the test; every error is the trial's
        with tempfile.TemporaryDirectory(prefix="run_hyper-") as scratch, validation_callback(report):
            record = run_pair(
                search.model, search.dataset, seed, scratch, search.config_files, overrides, None, (Exception,)
            )
        kept = {key: record[key] for key in ("best_valid_score", *RESULTS) if key in record}  # the run's own scores
        return {"seed": seed, **kept, "seconds": record["wall_seconds"]}


def suggest(trial, name, distribution):
    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    number = (
        trial.suggest_int if isinstance(distribution, optuna.distributions.IntDistribution) else trial.suggest_float
    )
    return number(name, distribution.low, distribution.high, step=distribution.step, log=distribution.log)


def optimize(search, study, max_evals):
    """Run trials until the study (all processes together) holds ``max_evals`` finished trials, or GridSampler has
    every point finished; a trial queued again (Ctrl-C, a dead process) runs first."""
    optuna.storages.fail_stale_trials(study)
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    exhausted = isinstance(study.sampler, optuna.samplers.GridSampler) and study.sampler.is_exhausted(study)
    if (waiting or not exhausted) and len(study.get_trials(deepcopy=False, states=DONE)) < max_evals:
        study.optimize(
            Objective(search),
            n_trials=max_evals,  # at most max_evals attempts in this process
            catch=(TrialFailed,),
            callbacks=[optuna.study.MaxTrialsCallback(max_evals, states=DONE)],
        )
    return study


def make_sampler(algo, params=()):
    if algo == "grid":
        return optuna.samplers.GridSampler({p.name: list(p.labels) for p in params}, seed=0)
    return optuna.samplers.RandomSampler() if algo == "random" else optuna.samplers.TPESampler()


def _result_text(runs, key):
    """RecBole's ``dict2str`` of the runs' ``key`` results, averaged over the seeds."""
    return dict2str({m: round(statistics.mean(r[key][m] for r in runs if m in r[key]), 4) for m in runs[0][key]})


def output_text(search, study, best):
    """RecBole's output file: the best trial, then every trial's parameters and
    valid and test results (pruned, failed and running trials say so)."""
    lines = []
    if best is not None:
        on_group = f" on {search.valid_group} items" if search.valid_group else ""
        lines += [
            f"best params: {params_text(search_space.settings_of_trial(search.params, best.params))}",
            f"best valid score: {best.value:.4f} (trial {best.number}; mean {search.valid_metric}{on_group} over "
            f"split seeds {search.seeds}; chosen on validation, test shown only)",
            "",
        ]
    for trial in study.get_trials(deepcopy=False):
        if not trial.params:  # not sampled yet
            continue
        runs = trial.user_attrs.get("runs") or []
        lines.append(params_text(search_space.settings_of_trial(search.params, trial.params)))
        if trial.state == TrialState.COMPLETE:
            lines += [
                t for key, title in RESULTS.items() if key in runs[0] for t in (f"{title}:", _result_text(runs, key))
            ]
        else:  # pruned, failed, or running (in another process, or stopped)
            what = trial.user_attrs.get("error") or f"{len(trial.intermediate_values)} validations reported"
            lines.append(f"{trial.state.name.capitalize()} ({what})")
        lines.append("")
    return "\n".join(lines) + "\n"


def report_write(search, study, best, command, properties_dir=LOCAL_PROPERTIES_DIR):
    """``--write``: the winner's values into ``properties_dir/dataset/DATASET/MODEL.yaml``, its other keys (a cost cap
    set by hand) kept; nothing on a tie at the best score (validation chose no winner)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    tied = sorted({params_text(t.params) for t in complete if t.value == best.value})  # a point run twice is one
    if len(tied) > 1:
        print(
            f"--write: nothing written: {len(tied)} trials tie at the best validation {search.valid_metric} "
            f"{best.value:.4f} ({'; '.join(tied)}), so validation chose none of them; "
            "separate them (more --seeds, other values) or set the values yourself."
        )
        return None
    path = tuned_properties_file(search.model, search.dataset, properties_dir)
    values = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}
    settings = search_space.settings_of_trial(search.params, best.params)
    values.update({name: convert_value(value) for name, value in settings.items()})  # as the trials read them
    header = (
        f"# {search.model} on {search.dataset}: {', '.join(settings)} chosen by validation {search.valid_metric} "
        f"(mean {best.value:.4f} over split seeds {search.seeds}),\n"
        f"# written {time.strftime('%Y-%m-%d')} by: {command}\n"
        f"# search space: {'; '.join(p.line() for p in search.params)}\n"
    )
    write_atomic(path, (header + yaml.safe_dump(values, sort_keys=False)).encode("utf-8"))
    print(f"best values written to {path}")
    return path


def main(args, overrides, command):
    """``recbole-fbsm hyper`` (``run_hyper.py``), its options read by recbole_fbsm.cli before torch loaded."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # trials are reported by our own lines
    return exit_status(
        lambda: _main(args, overrides, command),
        "interrupted: finished trials are kept in the study; the same command resumes the search",
    )


def _main(args, overrides, command):
    params_file = args.params_file or search_space.default_params_file(args.model)
    params = search_space.read_search_space(params_file)
    algo = args.algo or ("grid" if search_space.is_grid(params) else "tpe")
    if algo == "grid" and not search_space.is_grid(params):
        raise ColdStartError("--algo grid needs every parameter to be a choice; use --algo tpe or random")
    max_evals = args.max_evals or (search_space.grid_size(params) if algo == "grid" else DEFAULT_MAX_EVALS)
    config_files = args.config_files.split() if args.config_files else None
    search = Search(args.model, args.dataset, params, args.seeds, config_files, overrides, f"params file {params_file}")
    study_name = args.study_name or search.default_study_name()
    # the median pruner: not before 5 finished trials, nor on a trial's first 5 validations (early epochs are noisy:
    # on citeulike-t FBSM's validation score was still climbing after 50 epochs)
    median = optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=5)
    pruner = median if args.pruner == "median" else optuna.pruners.NopPruner()
    study = open_study(search, make_storage(args.storage), study_name, make_sampler(algo, params), pruner)
    print(f"study {study_name} in {args.storage}: {algo}, up to {max_evals} finished trials, seeds {search.seeds}")
    optimize(search, study, max_evals)
    output_file = Path(args.output_file or f"{study_name}.result")
    best = study.best_trial if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) else None
    text = output_text(search, study, best)
    write_atomic(output_file, text.encode("utf-8"))
    print(f"output: {output_file}")
    if best is None:
        print("error: no trial of the study has finished", file=sys.stderr)
        return 1
    print(text.partition("\n\n")[0])  # the best trial's lines
    if args.write:
        report_write(search, study, best, command, args.properties_dir)
    return 0
