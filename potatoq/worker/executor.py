"""One task run: a :class:`Delivery` in, the broker :data:`Outcome` to settle out.

The executor owns the task semantics the broker doesn't know about: looking the task up,
expiry and revocation, retries (``self.retry()``, ``autoretry_for``, backoff), results,
errbacks, the next step of a chain, link callbacks and chord joins. It never settles
anything itself: the caller (a worker child, ``potatoq.testing.drain``, eager mode) passes
the outcome to ``Broker.settle`` so that the result and follow-ups land atomically.
"""

from __future__ import annotations

import inspect
import logging
import os
import socket
import threading
import time
import traceback as tb_module
from collections.abc import Callable, Mapping, Sequence
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from .. import context, signals, states
from ..brokers.base import (
    Broker,
    ChordJoin,
    Complete,
    DeadLetter,
    Delivery,
    Outcome,
    Requeue,
    ResultRecord,
    RetryLater,
)
from ..canvas import build_messages, maybe_signature
from ..context import Context
from ..exceptions import ChordError, Ignore, Reject, Retry, TaskRevokedError
from ..message import Message
from ..result import decode_exception, encode_exception
from ..serialization import dumps, loads
from .ratelimit import Limiter, RateLimiter

if TYPE_CHECKING:
    import asyncio

    from ..app import Potatoq
    from ..task import Task

logger = logging.getLogger("potatoq.task")

#: Return values the encoder always accepts: no trial encoding of them on every task.
# No float: NaN and Infinity are floats that JSON (and the result encoder) refuses.
_ALWAYS_JSON: frozenset[type] = frozenset({type(None), bool, int, str})


class _TaskFailed(Exception):
    """Internal: carries an exception that should fail the task without running it."""


class Executor:
    """Runs deliveries for one process (thread-safe: one event loop per thread)."""

    def __init__(
        self,
        app: Potatoq,
        *,
        broker: Broker | None = None,
        backend: Broker | bool | None = True,
        hostname: str | None = None,
        always_store_results: bool = False,
        rate_limiter: Limiter | None = None,
    ) -> None:
        self.app = app
        self.broker = broker if broker is not None else app.broker
        if backend is True:
            self.backend: Broker | None = app.backend if broker is None else broker
        else:
            self.backend = backend or None
        # Results go into the outcome (written at settle) when the broker stores them, or
        # when it writes them to its result backend itself after checking that the
        # delivery is still current (RabbitMQ: a late settle must not overwrite a newer
        # delivery's result).
        self.results_atomic = self.backend is not None and (
            self.backend is self.broker or bool(getattr(self.broker, "writes_results_at_settle", False))
        )
        self.hostname = hostname
        self.always_store_results = always_store_results
        self._local = threading.local()
        self._rate_limiter: Limiter = rate_limiter if rate_limiter is not None else RateLimiter()

    # ------------------------------------------------------------------------- public API
    def execute(self, delivery: Delivery) -> Outcome:
        """Run the delivery's task and return what to settle. Never raises ``Exception``."""
        try:
            return self._execute(delivery)
        except Exception as exc:
            logger.exception("internal error running delivery %s", delivery.id)
            signals.task_internal_error.send(sender=None, task_id=delivery.id, exception=exc)
            return DeadLetter(reason=f"internal error: {type(exc).__name__}: {exc}")

    def lost_outcome(self, delivery: Delivery, exc: BaseException) -> Outcome:
        """The outcome for a delivery whose process died or was killed (WorkerLostError,
        TimeLimitExceeded): a dead letter with a FAILURE result, errbacks and chord join."""
        message = delivery.message
        if message is None:
            return DeadLetter(reason=f"{type(exc).__name__}: {exc}")
        task = self.app.tasks.get(message.task)
        request = self._request(message, delivery)
        return self._failure(message, task, request, exc, f"{type(exc).__name__}: {exc}\n", dead=True)

    def terminated_outcome(self, delivery: Delivery, signal_name: str) -> Outcome:
        """The outcome for a delivery whose process was stopped by ``revoke(terminate=True)``:
        a REVOKED result (and chord join), not run again."""
        message = delivery.message
        if message is None:
            return DeadLetter(reason=f"revoked and terminated ({signal_name})")
        request = self._request(message, delivery)
        task = self.app.tasks.get(message.task)
        signals.task_revoked.send(
            sender=task, request=request, terminated=True, signum=signal_name, expired=False
        )
        return self._revoked(message, request, f"revoked and terminated ({signal_name})")

    def wait_for_rate(self, delivery: Delivery, before: Callable[[], None] | None = None) -> bool:
        """Block until the delivery's task may start under its rate limit. True when it has
        one (``before`` is called first: the caller stops its time-limit clocks); the
        following :meth:`execute` of it in this thread then doesn't wait again."""
        message = delivery.message
        task = self.app.tasks.get(message.task) if message is not None else None
        if message is None or task is None:
            return False
        rate = self._rate_of(task)
        if not rate:
            return False
        if before is not None:
            before()
        self._rate_limiter.acquire(task.name, rate)
        self._local.granted = message.id
        return True

    def _rate_of(self, task: Task) -> str | float | int | None:
        if self.app.conf.worker_disable_rate_limits:
            return None
        rate: str | float | int | None = task.rate_limit or self.app.conf.task_default_rate_limit
        return rate

    def time_limits(self, delivery: Delivery) -> tuple[float | None, float | None]:
        """(soft, hard) seconds for this delivery: message headers, then task, then settings."""
        message = delivery.message
        conf = self.app.conf
        task = self.app.tasks.get(message.task) if message is not None else None
        headers = message.headers if message is not None else {}
        # The first that is set of: the call's header, the task's option, the setting.
        # Spelled out rather than through a helper taking *values: this runs for every task.
        hard = headers.get("time_limit")
        if hard is None:
            hard = getattr(task, "time_limit", None)
            if hard is None:
                hard = conf.task_time_limit
        soft = headers.get("soft_time_limit")
        if soft is None:
            soft = getattr(task, "soft_time_limit", None)
            if soft is None:
                soft = conf.task_soft_time_limit
        hard = None if hard is None else float(hard)
        soft = None if soft is None else float(soft)
        if soft is None and hard is not None:
            soft = hard - min(30.0, hard * 0.05)  # "a little before the hard one"
        return soft, hard

    # ------------------------------------------------------------------------- the run
    def _execute(self, delivery: Delivery) -> Outcome:
        message = delivery.message
        if message is None:
            logger.error("dead-lettering undecodable message %s: %s", delivery.id, delivery.error)
            return DeadLetter(reason=f"undecodable message: {delivery.error}")
        task = self.app.tasks.get(message.task)
        request = self._request(message, delivery)
        if message.expires is not None and time.time() > message.expires:
            logger.info("task %s[%s] expired, not run", message.task, message.id)
            signals.task_revoked.send(sender=task, request=request, terminated=False, expired=True)
            return self._revoked(message, request, "expired")
        if self.broker.is_revoked(message.id):
            signals.task_revoked.send(sender=task, request=request, terminated=False, expired=False)
            return self._revoked(message, request, "revoked")
        if task is None:
            from ..exceptions import NotRegistered

            exc = NotRegistered(message.task)
            logger.error("received unregistered task %r (id %s); dead-lettering it", message.task, message.id)
            signals.task_unknown.send(sender=None, name=message.task, id=message.id, message=message)
            return self._failure(message, None, request, exc, f"NotRegistered: {exc}\n", dead=True)

        args = tuple(message.args)
        chord_group = message.headers.get("chord_group")
        if chord_group:
            parts, failed = self._chord_parts(str(chord_group))
            if failed is not None:
                return self._failure(message, task, request, failed, f"{type(failed).__name__}: {failed}\n")
            if not message.headers.get("chord_immutable"):
                args = (parts, *args)
        request.update(args=args)
        if self._track_started(task):
            meta = {"pid": os.getpid(), "hostname": self.hostname or socket.gethostname()}
            self._store(ResultRecord(task_id=message.id, state=states.STARTED, result=meta, name=task.name))
        return self._run(task, message, request, args, dict(message.kwargs))

    def _run(
        self, task: Task, message: Message, request: Context, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Outcome:
        rate = self._rate_of(task)
        if rate:
            if getattr(self._local, "granted", None) != message.id:  # not waited for already
                self._rate_limiter.acquire(task.name, rate)
            self._local.granted = None
        token = context.push(task, request)
        started = time.monotonic()
        signals.task_prerun.send(sender=task, task_id=message.id, task=task, args=args, kwargs=kwargs)
        try:
            try:
                task.before_start(message.id, args, kwargs)
                retval = self._call(task, args, kwargs)
            except (Retry, Ignore, Reject):
                raise
            except Exception as exc:
                if (
                    task.autoretry_for
                    and isinstance(exc, task.autoretry_for)
                    and not (task.dont_autoretry_for and isinstance(exc, task.dont_autoretry_for))
                ):
                    task.retry(exc=exc, **dict(task.retry_kwargs or {}))
                raise
        except Retry as retry:
            return self._retry(task, message, request, retry)
        except Ignore:
            # Celery's semantics: no state is recorded (what update_state wrote stays), no
            # follow-ups run, and the message is acknowledged.
            logger.info("task %s[%s] ignored", task.name, message.id)
            return Complete()
        except Reject as reject:
            signals.task_rejected.send(sender=task, message=message, exc=reject)
            if reject.requeue:
                logger.info("task %s[%s] rejected and requeued: %r", task.name, message.id, reject.reason)
                return Requeue(crashed=True)
            logger.info("task %s[%s] rejected: %r", task.name, message.id, reject.reason)
            cause = reject.reason if isinstance(reject.reason, BaseException) else reject
            return self._failure(message, task, request, cause, tb_module.format_exc(), dead=True)
        except Exception as exc:  # noqa: BLE001 - the task's failure is its outcome
            trace = tb_module.format_exc()
            expected = bool(task.throws) and isinstance(exc, task.throws)
            if expected:
                logger.info("task %s[%s] raised expected: %r", task.name, message.id, exc)
            else:
                logger.error("task %s[%s] raised: %r\n%s", task.name, message.id, exc, trace)
            return self._failure(message, task, request, exc, trace, dead=not expected)
        finally:
            context.pop(token)
        runtime = time.monotonic() - started
        logger.info("task %s[%s] succeeded in %.3fs: %.200r", task.name, message.id, runtime, retval)
        return self._success(task, message, request, retval, args, kwargs, runtime)

    def _call(self, task: Task, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        retval = task.run(*args, **kwargs)
        if isinstance(retval, CoroutineType):  # inspect.iscoroutine, without its call
            return self._await(retval)
        return retval

    def _await(self, coro: Any) -> Any:
        # asyncio is imported by the first coroutine, not at start: with ssl it is about
        # 10 MB of resident memory in every worker process that never runs an async task.
        import asyncio
        import concurrent.futures

        if asyncio._get_running_loop() is not None:
            # Drained from inside a running event loop (tests, eager mode in async code):
            # this thread's loop is busy, so run the coroutine on a loop of its own thread.
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                return pool.submit(asyncio.run, coro).result()
        return self._loop().run_until_complete(coro)

    def _loop(self) -> asyncio.AbstractEventLoop:
        import asyncio

        loop: asyncio.AbstractEventLoop | None = getattr(self._local, "loop", None)
        if loop is None or loop.is_closed():
            loop = asyncio.new_event_loop()
            self._local.loop = loop
        return loop

    # ------------------------------------------------------------------------- outcomes
    def _success(
        self,
        task: Task,
        message: Message,
        request: Context,
        retval: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        runtime: float,
    ) -> Outcome:
        try:
            if type(retval) not in _ALWAYS_JSON:
                dumps(retval, where=f"return value of {task.name}")
        except TypeError as exc:
            return self._failure(message, task, request, exc, f"{type(exc).__name__}: {exc}\n", dead=True)
        headers = message.headers
        followups: list[Message] = []
        chord: ChordJoin | None = None
        chain = headers.get("chain")
        chord_info = headers.get("chord")
        links = headers.get("link")
        if chain or chord_info or links:  # most tasks have no follow-up: skip building lineage
            root = headers.get("root_id") or message.id
            lineage: dict[str, Any] = {"parent_id": message.id, "root_id": root}
            chain = list(chain or [])
            if chain:
                nxt = maybe_signature(chain[0], app=self.app)
                followups += build_messages(
                    self.app, nxt, prepend=(retval,), chain_rest=chain[1:], chord_info=chord_info, **lineage
                )
            elif chord_info:
                chord = self._chord_join(chord_info, {"ok": True, "v": retval}, lineage)
            for link in links or ():
                followups += build_messages(
                    self.app, maybe_signature(link, app=self.app), prepend=(retval,), **lineage
                )
        children = tuple(m.id for m in followups) + ((chord.callback.id,) if chord else ())
        record = None
        if self._stores_result(task, message, failed=False):
            record = self._record(message, task, request, states.SUCCESS, retval, None, children)
        signals.task_success.send(sender=task, result=retval)
        try:
            task.on_success(retval, message.id, args, kwargs)
            task.after_return(states.SUCCESS, retval, message.id, args, kwargs, None)
        except Exception:
            logger.exception("on_success/after_return handler of %s raised", task.name)
        signals.task_postrun.send(
            sender=task,
            task_id=message.id,
            task=task,
            args=args,
            kwargs=kwargs,
            retval=retval,
            state=states.SUCCESS,
        )
        return Complete(result=self._result_for_outcome(record), followups=tuple(followups), chord=chord)

    def _failure(
        self,
        message: Message,
        task: Task | None,
        request: Context,
        exc: BaseException,
        trace: str,
        *,
        dead: bool = True,
    ) -> Outcome:
        headers = message.headers
        lineage: dict[str, Any] = {"parent_id": message.id, "root_id": headers.get("root_id") or message.id}
        followups: list[Message] = []
        for errback in headers.get("link_error") or ():
            followups += self._errback(errback, request, exc, trace, lineage)
        chord = None
        chord_info = headers.get("chord")
        if chord_info:
            error = {"ok": False, "id": message.id, "exc": encode_exception(exc)}
            chord = self._chord_join(chord_info, error, lineage)
        record = None
        if task is None or self._stores_result(task, message, failed=True):
            record = self._record(message, task, request, states.FAILURE, encode_exception(exc), trace, ())
        if task is not None:
            signals.task_failure.send(
                sender=task,
                task_id=message.id,
                exception=exc,
                args=request.args,
                kwargs=request.kwargs,
                traceback=trace,
                einfo=trace,
            )
            try:
                task.on_failure(exc, message.id, tuple(request.args), dict(request.kwargs or {}), trace)
                task.after_return(
                    states.FAILURE, exc, message.id, tuple(request.args), dict(request.kwargs or {}), trace
                )
            except Exception:
                logger.exception("on_failure handler of %s raised", task.name)
            signals.task_postrun.send(
                sender=task,
                task_id=message.id,
                task=task,
                args=request.args,
                kwargs=request.kwargs,
                retval=exc,
                state=states.FAILURE,
            )
        result = self._result_for_outcome(record)
        if dead:
            return DeadLetter(
                reason=f"{type(exc).__name__}: {exc}", result=result, followups=tuple(followups), chord=chord
            )
        failed = (type(exc).__name__, str(exc))  # for task history, stored result or not
        return Complete(result=result, followups=tuple(followups), chord=chord, error=failed)

    def _retry(self, task: Task, message: Message, request: Context, retry: Retry) -> Outcome:
        args = getattr(retry, "retry_args", None)
        kwargs = getattr(retry, "retry_kwargs", None)
        options: Mapping[str, Any] = getattr(retry, "retry_options", None) or {}
        when = retry.when if retry.when is not None else time.time()
        changes: dict[str, Any] = {"retries": message.retries + 1, "eta": when}
        if args is not None:
            changes["args"] = tuple(args)
        if kwargs is not None:
            changes["kwargs"] = dict(kwargs)
        if options.get("queue"):
            changes["queue"] = options["queue"]
        if options.get("priority") is not None:
            changes["priority"] = int(options["priority"])
        nxt = message.replace(**changes)
        exc = retry.exc or retry
        logger.info(
            "task %s[%s] retry %d in %.1fs: %r",
            task.name,
            message.id,
            nxt.retries,
            max(0.0, when - time.time()),
            exc,
        )
        record = None
        if self._stores_result(task, message, failed=False):
            record = self._record(
                message, task, request, states.RETRY, encode_exception(exc), tb_module.format_exc(), ()
            )
        signals.task_retry.send(sender=task, request=request, reason=exc, einfo=None)
        try:
            task.on_retry(exc, message.id, tuple(request.args), dict(request.kwargs or {}), None)
        except Exception:
            logger.exception("on_retry handler of %s raised", task.name)
        asked = (type(exc).__name__, str(exc))  # for task history, stored result or not
        return RetryLater(message=nxt, result=self._result_for_outcome(record), error=asked)

    def _revoked(self, message: Message, request: Context, why: str) -> Outcome:
        exc = TaskRevokedError(f"task {message.id} {why}")
        chord = None
        chord_info = message.headers.get("chord")
        lineage: dict[str, Any] = {
            "parent_id": message.id,
            "root_id": message.headers.get("root_id") or message.id,
        }
        if chord_info:
            chord = self._chord_join(
                chord_info, {"ok": False, "id": message.id, "exc": encode_exception(exc)}, lineage
            )
        record = self._record(
            message,
            self.app.tasks.get(message.task),
            request,
            states.REVOKED,
            encode_exception(exc),
            None,
            (),
        )
        return Complete(result=self._result_for_outcome(record), chord=chord)

    # ------------------------------------------------------------------------- canvas
    def _errback(
        self,
        errback: Mapping[str, Any],
        request: Context,
        exc: BaseException,
        trace: str,
        lineage: dict[str, Any],
    ) -> list[Message]:
        sig = maybe_signature(dict(errback), app=self.app)
        task = self.app.tasks.get(sig.task)
        if task is not None and _accepts_request(task):
            # New-style errback (request, exc, traceback): called here, as Celery does,
            # because a live exception and request can't travel in a message.
            try:
                call = sig.clone((request, exc, trace))
                task(*call.args, **call.kwargs)
            except Exception:
                logger.exception("errback %s raised", sig.task)
            return []
        return build_messages(self.app, sig, prepend=(request.id,), **lineage)

    def _chord_join(self, info: Mapping[str, Any], part: Any, lineage: dict[str, Any]) -> ChordJoin:
        group_id = str(info["group_id"])
        body = maybe_signature(dict(info["body"]), app=self.app)
        first = body.tasks[0] if body.subtask_type == "chain" else body
        first.options["chord_group"] = group_id
        if first.immutable:
            first.options.setdefault("headers", {})["chord_immutable"] = True
        if body.subtask_type == "chain":
            tasks = body.tasks
            tasks[0] = first
            body["kwargs"]["tasks"] = tasks
        messages = build_messages(self.app, body, **lineage)
        if len(messages) != 1:
            raise TypeError("a chord's body must be one task or a chain, not a group")
        return ChordJoin(
            group_id=group_id,
            index=int(info["index"]),
            size=int(info["size"]),
            value=dumps(part, where="chord part").encode(),
            callback=messages[0],
        )

    def _chord_parts(self, group_id: str) -> tuple[list[Any], BaseException | None]:
        values = []
        for raw in self.broker.chord_parts(group_id):
            part = loads(raw)
            if not part.get("ok"):
                cause = decode_exception(part.get("exc"))
                return [], ChordError(f"Dependency {part.get('id')} raised {cause!r}")
            values.append(part.get("v"))
        return values, None

    # ------------------------------------------------------------------------- results
    def _track_started(self, task: Task) -> bool:
        flag = task.track_started if task.track_started is not None else self.app.conf.task_track_started
        return bool(flag) and self.backend is not None

    def _stores_result(self, task: Task, message: Message, *, failed: bool) -> bool:
        if self.backend is None:
            return False
        if self.always_store_results:
            return True
        ignore = message.headers.get("ignore_result")
        if ignore is None:
            ignore = (
                task.ignore_result if task.ignore_result is not None else self.app.conf.task_ignore_result
            )
        if not ignore:
            return True
        if failed:
            keep = task.store_errors_even_if_ignored
            return bool(keep if keep is not None else self.app.conf.task_store_errors_even_if_ignored)
        return False

    def _record(
        self,
        message: Message,
        task: Task | None,
        request: Context,
        state: str,
        result: Any,
        trace: str | None,
        children: Sequence[str],
    ) -> ResultRecord:
        extended = bool(self.app.conf.result_extended)
        return ResultRecord(
            task_id=message.id,
            state=state,
            result=result,
            traceback=trace,
            name=message.task,
            retries=message.retries,
            date_done=time.time(),
            parent_id=message.headers.get("parent_id"),
            group_id=message.headers.get("group_id"),
            children=tuple(children),
            args=tuple(request.args) if extended else None,
            kwargs=dict(request.kwargs or {}) if extended else None,
        )

    def _result_for_outcome(self, record: ResultRecord | None) -> ResultRecord | None:
        """Records go into the outcome when results live in the broker (atomic with the
        settle); otherwise they are written to the separate backend now."""
        if record is None:
            return None
        if self.results_atomic:
            return record
        self._store(record)
        return None

    def _store(self, record: ResultRecord) -> None:
        if self.backend is not None:
            self.backend.store_result(record)

    def _request(self, message: Message, delivery: Delivery) -> Context:
        headers = dict(message.headers)
        return Context.of(
            {
                "id": message.id,
                "task": message.task,
                "args": tuple(message.args),
                "kwargs": dict(message.kwargs),
                "retries": message.retries,
                "deliveries": delivery.deliveries,
                "delivery_count": delivery.deliveries,
                "eta": message.eta,
                "expires": message.expires,
                "parent_id": headers.get("parent_id"),
                "root_id": headers.get("root_id") or message.id,
                "group": headers.get("group_id"),
                "group_index": headers.get("group_index"),
                "chord": headers.get("chord"),
                "chain": headers.get("chain"),
                "callbacks": headers.get("link"),
                "errbacks": headers.get("link_error"),
                "headers": headers,
                "hostname": self.hostname,
                "is_eager": False,
                "ignore_result": bool(headers.get("ignore_result")),
                "timelimit": (headers.get("time_limit"), headers.get("soft_time_limit")),
                "delivery_info": {
                    "queue": delivery.queue,
                    "priority": message.priority,
                    "redelivered": delivery.deliveries > 1,
                    "claimed_at": delivery.claimed_at,  # epoch, by the broker's clock
                },
                "called_directly": False,
            }
        )


def _accepts_request(task: Task) -> bool:
    """True when an errback is called here with (request, exc, traceback), as Celery does:
    an unbound task whose function takes more than one argument. A bound task, or one
    taking a single argument, is sent as a task with the failed task's id instead."""
    if task.bound:
        return False
    fun: Callable[..., Any] = getattr(task, "__header__", None) or task.run
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) > 1 or any(p.kind == p.VAR_POSITIONAL for p in params)
