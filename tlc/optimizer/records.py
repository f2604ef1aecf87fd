"""What each build phase returns; the next phase takes it as an argument.

  layout.entries      -> [Entry]            (entry.py: what the layout decides)
  push.encode         -> Encoded            worker side of one variable's push
  push.decode         -> Decoded            PS side of it
  Channel.build_push  -> ChannelPush        one PS's push messages, both sides
  pull_log.build      -> PullLog            what a PS logs after each update
  aggregation.build_update(pushes) -> Update   the chief's update and the logs
  worker_step.build   -> Step               what the optimizer's API hands out
"""
import dataclasses
from typing import Any, Dict, List, Optional


@dataclasses.dataclass(frozen=True)
class Encoded:
    """A push of one variable on the worker."""
    parts: List[Any]          # the tensors the push message carries for it
    nbytes: Any               # their payload bytes (int64 scalar)
    seconds: Any = None       # compress seconds (float64 scalar) or None
    memory: List[Any] = dataclasses.field(default_factory=list)  # error-feedback variables


@dataclasses.dataclass(frozen=True)
class Decoded:
    """A push of one variable on its PS."""
    op: Any                   # the push into the accumulator
    aggregated: Any           # the averaged gradient the chief's update takes
    accumulator: Any          # the accumulator (its global step is set at init)


@dataclasses.dataclass(frozen=True)
class ChannelPush:
    """One PS's push (its buckets, in the order they are sent): the worker's
    parts and what the PS does with them."""
    encoded: Dict[str, Encoded]   # entry name -> worker side
    decoded: Dict[str, Decoded]   # entry name -> PS side
    ops: List[Any]                # every push op on the PS (statistics included)
    buckets: List[List[str]]      # entry names per message, last layers first
    gates: List[int]              # the buckets whose round the update takes on the board (not empty)
    messages: List[Any]           # each bucket's packed message, on the worker
    heads: List[Any]              # each message's header, on the PS
    worker_version: Any           # the pushing worker's model version, on the PS
    nbytes: Any                   # payload bytes of its messages
    seconds: List[Any]            # compress seconds of its variables
    aggregated: List[Any]         # [(averaged gradient, master)] for the inner optimizer


@dataclasses.dataclass(frozen=True)
class PullLog:
    """What one PS logs per step: each pulled variable's record parts (the
    templates the worker decodes the message with) and the pull payloads."""
    op: Any                              # log the step's rows, update shadows, publish
    records: Dict[str, List[Any]]        # entry name -> its parts in its row
    payloads: Dict[str, Optional[List[Any]]]  # entry name -> compressed pull payload
    rows: List[List[Any]]                # each row's entries, in push order (the last: after the token)

    def templates(self, entries):
        return [t for e in entries for t in self.records[e.name]]


@dataclasses.dataclass(frozen=True)
class Update:
    """The chief's update: its queue runner and each channel's pull log
    (None for a channel that nobody pulls from)."""
    runner: Any
    pull_logs: List[Optional[PullLog]]
    boards: List[Any]                    # every channel's round board
    tables: List[Any]                    # their pull logs (the tables)


@dataclasses.dataclass(frozen=True)
class VariableView:
    """Everything built for one variable, read from the records (the
    optimizer's debug view: SyncReplicasOptimizer.variables_built)."""
    entry: Any                       # entry.Entry: local, master, shadow, kind...
    push_parts: Optional[List[Any]]  # the tensors its push carries (None: not pushed)
    push_bucket: Optional[int]       # which of its PS's push messages (0: sent first)
    push_memory: List[Any]           # its error-feedback variables on the worker
    accumulator: Any                 # its accumulator on the PS (None: not pushed)
    pull_payload: Optional[List[Any]]  # its compressed pull payload (None: not compressed)


def variable_views(entries, pushes, update):
    """{entry name: VariableView} from the layout's entries and the phases' records."""
    encoded = {n: x for p in pushes for n, x in p.encoded.items()}
    bucket_of = {n: i for p in pushes for i, names in enumerate(p.buckets) for n in names}
    decoded = {n: x for p in pushes for n, x in p.decoded.items()}
    payloads = {n: x for log in update.pull_logs if log is not None
                for n, x in log.payloads.items()}
    views = {}
    for e in entries:
        enc, dec = encoded.get(e.name), decoded.get(e.name)
        views[e.name] = VariableView(
            entry=e, push_parts=enc.parts if enc else None,
            push_bucket=bucket_of.get(e.name),
            push_memory=list(enc.memory) if enc else [],
            accumulator=dec.accumulator if dec else None,
            pull_payload=payloads.get(e.name))
    return views


@dataclasses.dataclass(frozen=True)
class ChannelView:
    """What was built for one parameter server (the optimizer's debug view:
    SyncReplicasOptimizer.channels_built)."""
    device: str                      # the PS
    variables: List[str]             # names of the variables it holds
    push_buckets: List[List[str]]    # variable names per push message, in sending order
    pull_log: Any                    # its step -> message table (None: nothing pulled)
    reply: Any                       # the reply a worker reads after its token, on the PS
    replies: List[Any]               # every reply of a step (the early rows' first), on the PS


def channel_views(channels, step):
    """[ChannelView] from the channels and the step's records, the global step's PS first."""
    return [ChannelView(device=c.device, variables=[e.name for e in c.entries],
                        push_buckets=[list(b) for b in pushed.buckets],
                        pull_log=c.log, reply=replies[-1], replies=list(replies))
            for c, pushed, replies in zip(channels, step.pushes, step.replies)]
