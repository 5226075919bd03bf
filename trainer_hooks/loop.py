"""``TrainingLogger``: the same session files for a hand-written accelerate loop.

    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    with TrainingLogger("logs", accelerator=accelerator, model=model,
                        per_device_batch_size=8, max_steps=len(loader)) as tlog:
        for batch in loader:
            with tlog.step() as step:              # one optimizer step
                loss = model(**batch).loss
                accelerator.backward(loss)
                tlog.check_gradients(loss)         # optional: NaN/Inf report, layer norms
                optimizer.step(); optimizer.zero_grad()
                step.log(loss=loss.item(), learning_rate=scheduler.get_last_lr()[0])

The time between two ``step()`` blocks is the data time, except what ``tlog.phase("eval")`` /
``tlog.phase("save")`` blocks time (evaluation, checkpoint saving: the ledger counts them apart,
``analyze_logs DIR --ledger``); an exception inside the ``with
TrainingLogger`` block ends the session as ``failed`` and is re-raised untouched.
"""

from __future__ import annotations

from contextlib import contextmanager

from logkit.schema import Status
from trainer_hooks.guard import guarded
from trainer_hooks.lifecycle import end_on_exit
from trainer_hooks.session_logger import SessionLogger


class StepMetrics:
    """What one step reports; filled inside ``with tlog.step() as step``."""

    __slots__ = ("loss", "learning_rate", "grad_norm", "tokens")

    def __init__(self) -> None:
        self.loss = self.learning_rate = self.grad_norm = self.tokens = None

    def log(self, loss=None, learning_rate=None, grad_norm=None, tokens=None) -> None:
        for name, value in (("loss", loss), ("learning_rate", learning_rate),
                            ("grad_norm", grad_norm), ("tokens", tokens)):
            if value is not None:
                setattr(self, name, value)


class TrainingLogger:
    """Log a hand-written (accelerate) training loop.

    Args:
        log_dir, verbosity, log_interval_steps, performance_log_steps,
        detailed_communication_logs: as for ``LogkitCallback``.
        accelerator: an ``accelerate.Accelerator``; gives mixed precision and accumulation.
        model: the prepared (DDP-wrapped) model: its gradient synchronisation is timed.
        per_device_batch_size / total_batch_size: samples per optimizer step.
        max_steps: for the ETA. model_name, config: recorded in ``session_start``.
        **settings: any field of ``trainer_hooks.settings.LogSettings``.
    """

    def __init__(self, log_dir: str = "logs", verbosity: str = "high", *, accelerator=None, model=None,
                 per_device_batch_size: int | None = None, total_batch_size: int | None = None,
                 gradient_accumulation_steps: int | None = None, max_steps: int | None = None,
                 model_name: str | None = None, config: dict | None = None, time_communication: bool = True,
                 **settings) -> None:
        self.logger = SessionLogger(log_dir=log_dir, verbosity=verbosity, **settings)
        self.accelerator = accelerator
        self.model = model
        self._start_kwargs = dict(
            model_name=model_name, config=config, per_device_batch_size=per_device_batch_size,
            total_batch_size=total_batch_size, max_steps=max_steps,
            gradient_accumulation_steps=gradient_accumulation_steps
            or int(getattr(accelerator, "gradient_accumulation_steps", 1) or 1),
            mixed_precision=str(getattr(accelerator, "mixed_precision", "no")) if accelerator else None,
        )
        self.time_communication = time_communication
        self.global_step = 0

    @property
    def session_dir(self):
        return self.logger.folder

    @guarded
    def start(self) -> TrainingLogger:
        """Open the session (a collective: every rank calls it, as ``with`` does)."""
        self.logger.start(model=_unwrap(self.model), wrapped=self.model, time_communication=self.time_communication,
                          **self._start_kwargs)
        end_on_exit(self.logger, "the process exited before training ended (the TrainingLogger was not closed)")
        if self.time_communication and self.model is not None:
            self.logger.attach_model(self.model)
        return self

    @contextmanager
    def step(self, step: int | None = None):
        """One optimizer step; yields a ``StepMetrics`` to fill."""
        self.logger.step_begin()
        metrics = StepMetrics()
        yield metrics
        self.log_step(step, loss=metrics.loss, learning_rate=metrics.learning_rate,
                      grad_norm=metrics.grad_norm, tokens=metrics.tokens)

    @guarded
    def log_step(self, step: int | None = None, *, loss=None, learning_rate=None, grad_norm=None,
                 tokens=None, epoch=None) -> None:
        """Explicit form of ``step()``: call once after each optimizer step."""
        self.global_step = step if step is not None else self.global_step + 1
        self.logger.step_end(self.global_step, epoch=epoch, loss=loss, learning_rate=learning_rate,
                             grad_norm=grad_norm, tokens=tokens)

    def micro_batch_end(self) -> None:
        """After each micro-batch's backward (gradient accumulation): a ``batch_complete``
        record at ``ultra``, with its index in the step and its duration."""
        self.logger.micro_batch_end()

    def check_gradients(self, loss=None) -> bool:
        """Between backward and ``optimizer.step()``: NaN/Inf in any gradient gives a
        ``nan_detected`` report with a tensor dump; at ``ultra``, per-layer gradient norms.
        ``loss``: the step's loss tensor (or a list, one per micro-batch): a non-finite one is
        reported and dumped too, as the NaN's origin (kind ``nan_loss``).
        Returns False when a gradient is not finite (training goes on unless you stop it,
        or ``stop_on_nan=True`` was given: then ``should_stop`` turns True)."""
        if self.model is None:
            return True
        losses = None
        if loss is not None:
            losses = [t for t in (loss if isinstance(loss, (list, tuple)) else [loss]) if hasattr(t, "detach")]
        return self.logger.check_gradients(self.model, self.global_step + 1, losses=losses) is not False

    @property
    def should_stop(self) -> bool:
        return self.logger.stop_requested

    def phase(self, name: str):
        """Time a block that is not a step: ``with tlog.phase("eval"): ...`` (``eval``, ``save``, or a
        name of your own), a ``timed_phase`` record when it ends."""
        return self.logger.phase(name)

    def evaluate(self, metrics: dict, step: int | None = None) -> None:
        self.logger.evaluation(self.global_step if step is None else step, metrics)

    def close(self, status: str = Status.COMPLETED) -> None:
        self.logger.end(status)

    def __enter__(self) -> TrainingLogger:
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None:
            self.logger.error(exc)
            self.close(Status.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else Status.FAILED)
        else:
            self.close(Status.COMPLETED)
        return False


def _unwrap(model):
    return getattr(model, "module", model) if model is not None else None
