"""``LogkitCallback``: the transformers / TRL ``TrainerCallback`` that writes a logkit session.

    trainer = Trainer(..., callbacks=[LogkitCallback(log_dir="logs")])

Every rank runs it: rank 0 picks the session id and writes the text logs and the summary,
every rank writes its own JSONL stream, and gradient synchronisation is timed by a DDP
communication hook installed on the Trainer's DDP wrapper (nothing else to write).
Evaluation and checkpoint saving are timed for the ledger between the Trainer's events: an
evaluation from the event before it (the step's end, its training log, the epoch's end, an earlier
evaluation or save) to ``on_evaluate``, a save likewise to ``on_save`` (the Trainer gives no event at
their beginning; what runs between that event and theirs is theirs: ``_maybe_log_save_evaluate``).
``VerboseLoggingCallback`` keeps its earlier name and arguments.
"""

from __future__ import annotations

import time
from pathlib import Path

from transformers import TrainerCallback

from logkit.schema import Status
from trainer_hooks.guard import guarded
from trainer_hooks.lifecycle import end_on_exit
from trainer_hooks.session_logger import SessionLogger
from trainer_hooks.steps import step_metric_key


class LogkitCallback(TrainerCallback):
    """Log a transformers Trainer (or TRL SFTTrainer) run into ``log_dir/<session id>/``.

    Args:
        log_dir: the folder that receives the session folder.
        verbosity: ``low | medium | high | ultra`` (see ``trainer_hooks.settings``).
        time_communication: time the collectives (the DDP comm hook, FSDP2 comm objects, or torch.distributed).
        model_name, config: recorded in ``session_start`` (config is any JSON-able dict).
        session_id: use this id instead of ``training_<timestamp>``.
        **settings: any field of ``trainer_hooks.settings.LogSettings``, e.g.
            ``log_interval_steps``, ``performance_log_steps``, ``gpu_snapshot_interval``,
            ``detailed_communication_logs``; or ``stop_on_nan=True``.
    """

    def __init__(self, log_dir: str = "logs", verbosity: str = "high", *, time_communication: bool = True,
                 model_name: str | None = None, config: dict | None = None, session_id: str | None = None,
                 mirror_jsonl: str | None = None, **settings) -> None:
        self.logger = SessionLogger(log_dir=log_dir, verbosity=verbosity, session_id=session_id,
                                    mirror_jsonl=mirror_jsonl, **settings)
        self.time_communication = time_communication
        self.model_name = model_name
        self.config = config
        self._tokens_seen = 0
        self._model = None
        self._loss_hook = None
        self._mark: float | None = None  # the Trainer's last event an evaluation or a save may follow
        self._predicting = False  # an evaluation's batches are running (its own log is part of it)
        s = self.logger.settings  # what the per-step methods skip at this verbosity, decided once
        if s.grad_check or s.layer_grad_norms:
            self.on_pre_optimizer_step = self._check_gradients
        self._trainer_logs = s.trainer_logs

    @property
    def session_dir(self):
        return self.logger.folder

    @guarded
    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        world = max(1, int(getattr(args, "world_size", 1) or 1))
        per_device = int(args.per_device_train_batch_size)
        accumulation = int(args.gradient_accumulation_steps)
        precision = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else "no"
        config = {
            "learning_rate": args.learning_rate,
            "logging_steps": args.logging_steps,
            "max_steps": state.max_steps,
            "num_train_epochs": args.num_train_epochs,
            "seed": args.seed,
            "output_dir": str(args.output_dir),
            "gradient_checkpointing": bool(getattr(args, "gradient_checkpointing", False)),
            # the Trainer then gathers each step's token count across ranks inside the data phase
            "average_tokens_across_devices": bool(getattr(args, "average_tokens_across_devices", False)),
            **(self.config or {}),
        }
        self.logger.start(model=model, model_name=self.model_name, config=config, per_device_batch_size=per_device,
                          gradient_accumulation_steps=accumulation, total_batch_size=per_device * accumulation * world,
                          max_steps=state.max_steps, mixed_precision=precision, dataloader=train_dataloader,
                          time_communication=self.time_communication)
        end_on_exit(self.logger, "the process exited before training ended (on_train_end never ran)")
        self._model = model
        if model is not None and hasattr(model, "register_forward_hook") and self.logger.settings.loss_tensors:
            # the loss tensor of each training micro-batch, by reference (no sync): a NaN/Inf
            # report then shows the loss itself, not only what it did to the gradients
            self._loss_hook = model.register_forward_hook(self._note_loss)
        if self.time_communication and model is not None:
            self.logger.attach_model(model)
        self._tokens_seen = int(getattr(state, "num_input_tokens_seen", 0) or 0)
        self._mark = time.perf_counter()  # eval_on_start evaluates before the first step

    # The per-step methods below are the hot path: each is one flat frame, the guard written inline
    # (a wrapper frame costs microseconds on caches the step's compute left cold), and what is not
    # needed at this verbosity is skipped before any call.
    def _note_loss(self, module, args, output) -> None:
        # a forward hook: it must never raise into the model's forward
        try:
            if module.training:
                loss = getattr(output, "loss", None)
                if loss is None and isinstance(output, dict):
                    loss = output.get("loss")
                if loss is not None and hasattr(loss, "detach"):
                    self.logger.note_loss(loss)
        except Exception:
            pass

    def on_step_begin(self, args, state, control, **kwargs):
        self._mark = None
        self.logger.step_begin()  # guarded itself

    def on_substep_end(self, args, state, control, **kwargs):
        self.logger.micro_batch_end()  # guarded itself

    def _check_gradients(self, args, state, control, **kwargs):
        # on_pre_optimizer_step where the verbosity reads the gradients (bound in __init__; else the
        # Trainer's no-op): they exist only between backward and the optimizer step
        if self._model is not None:
            self.logger.check_gradients(self._model, state.global_step + 1)  # guarded itself

    def on_step_end(self, args, state, control, **kwargs):
        logger = self.logger
        try:
            # the step's last micro-batch (the earlier ones ended in on_substep_end)
            logger.micro_batch_end()
            seen = getattr(state, "num_input_tokens_seen", 0)
            if seen:
                seen = int(seen)
                tokens, self._tokens_seen = seen - self._tokens_seen, seen
            else:
                tokens = None
            # The loss of this step arrives in on_log right after: keep the record open.
            logger.step_end(state.global_step, epoch=state.epoch, tokens=tokens or None, flush=False)
            if logger.stop_requested:
                control.should_training_stop = True
        except Exception as exc:
            logger._fault("LogkitCallback.on_step_end failed", exc)
        self._mark = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        logger = self.logger
        try:
            if self._trainer_logs:
                logger.trainer_log(state.global_step, logs)
            # one pass over the keys: does the log hold a step metric, is it a timed phase's own log
            step_metric = runtime = False
            for key in logs:
                if type(key) is not str:
                    key = str(key)
                if key.endswith("_runtime"):
                    runtime = True
                elif not step_metric and step_metric_key(key):
                    step_metric = True
            if step_metric:
                # loss, learning rate and grad norm read now; the log's other numbers on the writer thread
                logger.add_metrics(state.global_step, logs)
            # the step's NaN/Inf may show only in its log (a NaN grad norm, read after on_step_end):
            # the Trainer checks the flag after logging, so it still stops after this very step
            if logger.stop_requested:
                control.should_training_stop = True
        except Exception as exc:
            logger._fault("LogkitCallback.on_log failed", exc)
            runtime = True
        # a training log: an evaluation may start after it (an evaluation's own log, inside it, has a
        # *_runtime key, and comes after its prediction steps)
        if self._mark is not None and not self._predicting and not runtime:
            self._mark = time.perf_counter()

    @guarded
    def on_prediction_step(self, args, state, control, **kwargs):
        self._predicting = True

    @guarded
    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self._timed("eval")
        self._predicting = False
        if metrics:
            self.logger.evaluation(state.global_step, metrics)
        self._mark = time.perf_counter()

    @guarded
    def on_save(self, args, state, control, **kwargs):
        self._timed("save")
        self.logger.checkpoint(state.global_step, Path(args.output_dir) / f"checkpoint-{state.global_step}")
        self._mark = time.perf_counter()

    def _timed(self, phase: str) -> None:
        """``phase`` ran from the last event (``_mark``) to now; unknown outside the training loop (a
        ``trainer.evaluate()`` of the user's, before or after ``train``)."""
        if self._mark is not None:
            self.logger.timed_phase(phase, self._mark)

    @guarded
    def on_epoch_end(self, args, state, control, **kwargs):
        self.logger.epoch_end(state.global_step, state.epoch)
        self._mark = time.perf_counter()

    @guarded
    def on_train_end(self, args, state, control, **kwargs):
        self._mark = None
        hook, self._loss_hook = self._loss_hook, None
        if hook is not None:
            hook.remove()
        self.logger.end(Status.COMPLETED)


class VerboseLoggingCallback(LogkitCallback):
    """The verbose callback, kept by name: ``VerboseLoggingCallback(verbosity_level="high",
    log_file="verbose_training_logs.jsonl")``. The session folder is written as usual (under
    ``log_dir``), and rank 0's JSONL stream is also written to ``log_file``."""

    def __init__(self, verbosity_level: str = "high", log_file: str = "verbose_training_logs.jsonl",
                 log_dir: str = "logs", **kwargs) -> None:
        super().__init__(log_dir=log_dir, verbosity=verbosity_level, mirror_jsonl=log_file, **kwargs)
        self.verbosity_level = verbosity_level
        self.log_file = log_file
