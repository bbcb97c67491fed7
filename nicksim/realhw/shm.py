"""One direction of a connection between two ranks on one host, through POSIX shared memory.

A segment holds NCCL_STEPS slots of `step_nbytes` and two counters, as NCCL's Simple protocol lays
out a connection's FIFO: `tail`, the steps the sender has posted, and `head`, the steps the
receiver has consumed, each in its own 128-byte line ahead of the slots. The sender waits for a
free slot (tail - head < NCCL_STEPS), fills it, records its length and advances tail; the receiver
waits for tail > head, reads the slot and advances head, which returns the slot's credit. LLRing
and LL128Ring lay the slots out as NCCL's LL and LL128 do, in lines that carry their own flags.

The receiver creates the segment, the sender attaches to it, and the creator unlinks the name as
soon as both have it mapped (`unlink`), so nothing is left under /dev/shm however the processes
end. A wait longer than `timeout_s` raises ShmTimeoutError naming the connection and what it was
waiting for: a peer that died or hangs is reported, never waited on forever.
"""
from __future__ import annotations

import mmap
import os
import time

import numpy as np

from ..errors import NickSimError

__all__ = ["NCCL_STEPS", "ShmRing", "LLRing", "LL128Ring", "ShmTimeoutError", "segment_name", "create_segment",
           "attach_segment"]

NCCL_STEPS = 8
_LINE = 128  # the counters each get a cache line's worth of room (NCCL keeps head and tail apart)
_HEAD, _TAIL, _SIZES = 0, _LINE, 2 * _LINE  # byte offsets: head, tail, then one uint64 length per slot
_SLOTS = _SIZES + _LINE
_SPIN_S = (0.0, 1e-5, 1e-4, 5e-4)  # back-off between polls: first spin, then sleep a little longer


class ShmTimeoutError(NickSimError):
    """A shared-memory connection's peer did not move within the timeout."""

    kind = "timeout"


def segment_name(job: str, channel: int, src: int, dst: int, conn: int = 0) -> str:
    """The segment's name under /dev/shm: the job's tag and the connection it carries."""
    return f"nicksim-{job}-c{channel}-{src}to{dst}-{conn}"


# Both sides map a segment with its pages in place (tmpfs allocates them at the creator's mapping),
# as a GPU's buffers are before the first call: else the first calls fault them in, one by one.
_POPULATE = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


def create_segment(name: str, nbytes: int) -> tuple[int, mmap.mmap]:
    """A new zeroed segment /dev/shm/NAME of `nbytes`, mapped: (fd, mapping)."""
    fd = os.open(f"/dev/shm/{name}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.ftruncate(fd, nbytes)
    return fd, mmap.mmap(fd, nbytes, flags=_POPULATE)


def attach_segment(name: str, nbytes: int, label: str, timeout_s: float) -> tuple[int, mmap.mmap]:
    """The segment another process made, once it exists at its full size (up to `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fd = os.open(f"/dev/shm/{name}", os.O_RDWR)
            if os.fstat(fd).st_size == nbytes:
                return fd, mmap.mmap(fd, nbytes, flags=_POPULATE)
            os.close(fd)  # made but not yet sized
        except FileNotFoundError:
            pass
        if time.monotonic() >= deadline:
            raise ShmTimeoutError(f"{label}: the receiver's segment {name} did not appear within {timeout_s:g} s",
                                  "shm")
        time.sleep(1e-3)


class ShmRing:
    """One connection's FIFO of NCCL_STEPS slots in shared memory, seen from one side ("send" or
    "recv"); `label` names it in errors (e.g. 'channel 0, rank 1 -> rank 2')."""

    protocol = "Simple"

    def __init__(self, name: str, step_nbytes: int, side: str, label: str, fd: int, buf: mmap.mmap, owner: bool):
        self.name, self.step_nbytes, self.side, self.label = name, step_nbytes, side, label
        self.data_nbytes = self.step_data_nbytes(step_nbytes)
        self._fd, self._buf, self._owner = fd, buf, owner
        self._head = np.frombuffer(buf, np.uint64, 1, _HEAD)
        self._tail = np.frombuffer(buf, np.uint64, 1, _TAIL)
        self._sizes = np.frombuffer(buf, np.uint64, NCCL_STEPS, _SIZES)
        self._data = self._map_slots(buf)
        self._step = 0  # this side's own count: the next step it posts (send) or takes (recv)
        self._unlinked = not owner

    @staticmethod
    def segment_nbytes(step_nbytes: int) -> int:
        return _SLOTS + NCCL_STEPS * step_nbytes

    @staticmethod
    def step_data_nbytes(step_nbytes: int) -> int:
        """The data one step carries in a slot of `step_nbytes`: all of it, for Simple."""
        return step_nbytes

    @staticmethod
    def layout(protocol: str) -> type["ShmRing"]:
        """The ring class that lays a slot out for `protocol` (Simple, LL, LL128)."""
        return _RING_OF[protocol]

    @classmethod
    def create(cls, name: str, step_nbytes: int, label: str, protocol: str = "Simple") -> "ShmRing":
        """The receiving side: make the segment (zeroed: head = tail = 0, no flag set), laid out
        for `protocol`."""
        cls = _RING_OF[protocol]
        fd, buf = create_segment(name, cls.segment_nbytes(step_nbytes))
        return cls(name, step_nbytes, "recv", label, fd, buf, True)

    @classmethod
    def attach(cls, name: str, step_nbytes: int, label: str, timeout_s: float, protocol: str = "Simple") -> "ShmRing":
        """The sending side: map the segment the receiver made, waiting for it up to `timeout_s`."""
        cls = _RING_OF[protocol]
        fd, buf = attach_segment(name, cls.segment_nbytes(step_nbytes), label, timeout_s)
        return cls(name, step_nbytes, "send", label, fd, buf, False)

    def _map_slots(self, buf: mmap.mmap) -> np.ndarray:
        """The slots' bytes: in the segment, after the counters."""
        return np.frombuffer(buf, np.uint8, NCCL_STEPS * self.step_nbytes, _SLOTS)

    def unlink(self) -> None:
        """Drop the name once both sides have the segment mapped (the creator's call)."""
        if not self._unlinked:
            try:
                os.unlink(f"/dev/shm/{self.name}")
            except FileNotFoundError:
                pass
            self._unlinked = True

    def close(self) -> None:
        """Unmap the segment and close its descriptor (again: nothing)."""
        if self._fd is None:
            return
        self.unlink()
        for view in ("_head", "_tail", "_sizes", "_data"):
            setattr(self, view, None)
        try:
            self._buf.close()
        except BufferError:
            pass  # a step still viewed by the caller: the mapping goes with the last view
        os.close(self._fd)
        self._fd = None

    # --- moving steps ---------------------------------------------------------------------

    def _wait(self, ready, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        polls = 0
        while not ready():
            if time.monotonic() >= deadline:
                raise ShmTimeoutError(f"{self.label}: {what} for {timeout_s:g} s (step {self._step})", "shm")
            time.sleep(_SPIN_S[min(polls // 256, len(_SPIN_S) - 1)])
            polls += 1

    def can_send(self) -> bool:
        """Whether a slot is free for the next step."""
        return self._step - int(self._head[0]) < NCCL_STEPS

    def can_recv(self) -> bool:
        """Whether the next step has been posted."""
        return int(self._tail[0]) > self._step

    def free_steps(self) -> int:
        """How many steps can be posted now, in slots that follow each other in memory (a batch
        never wraps past the last slot)."""
        return min(NCCL_STEPS - (self._step - int(self._head[0])), NCCL_STEPS - self._step % NCCL_STEPS)

    def ready_steps(self) -> int:
        """How many posted steps can be taken now, in slots that follow each other in memory."""
        return min(int(self._tail[0]) - self._step, NCCL_STEPS - self._step % NCCL_STEPS)

    def credits(self) -> int:
        """Slots free for the sender now, wherever they sit."""
        return NCCL_STEPS - (self._step - int(self._head[0]))

    def slot_memory(self) -> np.ndarray:
        """Every slot's bytes, one array over the segment (what a NIC registers to move steps in)."""
        return self._data

    def slot_ahead(self, ahead: int, nbytes: int) -> np.ndarray:
        """The sender's slot `ahead` steps past the next one, `nbytes` of it, to fill before
        it is posted (steps are posted in order; the caller keeps within `credits`)."""
        start = ((self._step + ahead) % NCCL_STEPS) * self.step_nbytes
        return self._data[start:start + nbytes]

    def posted_ahead(self, ahead: int) -> np.ndarray | None:
        """The receiver's view of the step `ahead` past the next one, if it has been posted."""
        if int(self._tail[0]) <= self._step + ahead:
            return None
        slot = (self._step + ahead) % NCCL_STEPS
        start = slot * self.step_nbytes
        return self._data[start:start + int(self._sizes[slot])]

    def send(self, data: np.ndarray, timeout_s: float, steps: int = 1) -> None:
        """Post `steps` steps holding `data` (full slots but the last; may be empty)."""
        payload = data.reshape(-1).view(np.uint8)
        self._wait(lambda: self.free_steps() >= steps, "no free slot: the receiver took nothing", timeout_s)
        self.reserve(payload.size, steps)[:] = payload
        self.post(payload.size, steps)

    def reserve(self, nbytes: int, steps: int = 1) -> np.ndarray:
        """The next `steps` slots, `nbytes` of them, to fill in place (once free_steps allows)."""
        if nbytes > steps * self.step_nbytes:
            raise ValueError(f"{nbytes} bytes in {steps} slots of {self.step_nbytes}")
        start = (self._step % NCCL_STEPS) * self.step_nbytes
        return self._data[start:start + nbytes]

    def post(self, nbytes: int, steps: int = 1) -> None:
        """Post the reserved slots, filled with `nbytes` bytes: every slot full but the last."""
        slot = self._step % NCCL_STEPS
        self._sizes[slot:slot + steps - 1] = self.step_nbytes
        self._sizes[slot + steps - 1] = nbytes - (steps - 1) * self.step_nbytes
        self._step += steps
        self._tail[0] = self._step  # x86 keeps stores in order: the data and sizes are seen before the tail

    def recv(self, timeout_s: float, steps: int = 1, nbytes: int | None = None) -> np.ndarray:
        """The next `steps` steps' bytes (a view into the slots: use it before `release`), every
        step but the last taken as full, as a primitive posts them. Simple reads their length
        from the slots; `nbytes`, what the receiver expects, is for the line protocols."""
        self._wait(lambda: self.ready_steps() >= steps, "nothing arrived from the sender", timeout_s)
        slot = self._step % NCCL_STEPS
        start = slot * self.step_nbytes
        return self._data[start:start + (steps - 1) * self.step_nbytes + int(self._sizes[slot + steps - 1])]

    def release(self, steps: int = 1) -> None:
        """Give the steps just read back to the sender."""
        self._step += steps
        self._head[0] = self._step


class _LineRing(ShmRing):
    """A FIFO whose steps travel in lines that carry their own flag, as NCCL's LL and LL128
    buffers do: the sender writes a step's data and then every line's flag (the step's number plus
    one, so a slot's previous use never passes); the receiver knows how many bytes it expects,
    waits until every line of them shows the flag, and reads the data out of the lines. The tail
    counter and lengths are unused; the head still returns the slots' credit to the sender.
    Subclasses give the line: its bytes, the data words it holds and where its flags sit."""

    LINE_NBYTES = 16
    WORD = np.uint32
    DATA = slice(0)  # the line's data words
    FLAGS = slice(0)  # its flag words
    DATA_WORDS = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._stage = np.zeros(NCCL_STEPS * (self.data_nbytes + self._line_data_nbytes()), np.uint8)

    @classmethod
    def _line_data_nbytes(cls) -> int:
        return cls.DATA_WORDS * np.dtype(cls.WORD).itemsize

    @classmethod
    def step_data_nbytes(cls, step_nbytes: int) -> int:
        return step_nbytes // cls.LINE_NBYTES * cls._line_data_nbytes()

    def _lines(self, slot: int, nbytes: int) -> np.ndarray:
        """The lines of `slot` that `nbytes` of data fill, as (lines, words per line)."""
        n_lines = -(-nbytes // self._line_data_nbytes())
        start = slot * self.step_nbytes
        words_per_line = self.LINE_NBYTES // np.dtype(self.WORD).itemsize
        return self._data[start:start + n_lines * self.LINE_NBYTES].view(self.WORD).reshape(n_lines, words_per_line)

    def _step_sizes(self, nbytes: int, steps: int) -> list[int]:
        return [min(self.data_nbytes, nbytes - i * self.data_nbytes) for i in range(steps)]

    # --- sending --------------------------------------------------------------------------

    def reserve(self, nbytes: int, steps: int = 1) -> np.ndarray:
        """Room for the next `steps` steps' data, outside the slots: `post` writes it into lines."""
        if nbytes > steps * self.data_nbytes:
            raise ValueError(f"{nbytes} bytes in {steps} steps of {self.data_nbytes}")
        return self._stage[:nbytes]

    def post(self, nbytes: int, steps: int = 1) -> None:
        self._write_lines(self._stage[:nbytes], steps)

    def send(self, data: np.ndarray, timeout_s: float, steps: int = 1) -> None:
        payload = data.reshape(-1).view(np.uint8)
        self._wait(lambda: self.free_steps() >= steps, "no free slot: the receiver took nothing", timeout_s)
        if payload.size > steps * self.data_nbytes:
            raise ValueError(f"{payload.size} bytes in {steps} steps of {self.data_nbytes}")
        self._write_lines(payload, steps)

    def _write_lines(self, payload: np.ndarray, steps: int) -> None:
        line_data = self._line_data_nbytes()
        offset = 0
        for size in self._step_sizes(payload.size, steps):
            lines = self._lines(self._step % NCCL_STEPS, max(1, size))  # an empty step still flags a line
            if size % line_data or not size:  # the last line is padded
                padded = np.zeros(len(lines) * line_data, np.uint8)
                padded[:size] = payload[offset:offset + size]
                words = padded.view(self.WORD)
            else:
                words = payload[offset:offset + size].view(self.WORD)
            lines[:, self.DATA] = words.reshape(len(lines), self.DATA_WORDS)
            lines[:, self.FLAGS] = self._step + 1  # after the data: x86 makes stores visible in order
            offset += size
            self._step += 1

    # --- receiving ------------------------------------------------------------------------

    def _flagged(self, slot: int, step: int, nbytes: int) -> bool:
        lines = self._lines(slot, max(1, nbytes))
        return bool(np.all(lines[:, self.FLAGS] == self.WORD(step + 1)))

    def ready_steps(self) -> int:
        """Steps whose first line shows its flag (the rest of the step follows it closely),
        in slots that follow each other in memory."""
        n = 0
        while n < NCCL_STEPS - self._step % NCCL_STEPS and self._flagged((self._step + n) % NCCL_STEPS,
                                                                         self._step + n, 1):
            n += 1
        return n

    def can_recv(self) -> bool:
        return self._flagged(self._step % NCCL_STEPS, self._step, 1)

    def recv(self, timeout_s: float, steps: int = 1, nbytes: int | None = None) -> np.ndarray:
        if nbytes is None:
            raise ValueError(f"{self.protocol} needs the bytes it expects")
        out, offset = self._stage, 0
        for i, size in enumerate(self._step_sizes(nbytes, steps)):
            step = self._step + i
            slot = step % NCCL_STEPS
            self._wait(lambda: self._flagged(slot, step, size), "nothing arrived from the sender", timeout_s)
            lines = self._lines(slot, size)
            words = out[offset:offset + len(lines) * self._line_data_nbytes()].view(self.WORD)
            words.reshape(len(lines), self.DATA_WORDS)[:] = lines[:, self.DATA]
            offset += size
            if size % self._line_data_nbytes() and i < steps - 1:
                raise ValueError("a short step before the last")
        return out[:nbytes]


class LLRing(_LineRing):
    """LL: 16-byte lines of two 4-byte data words, each followed by its flag word (ncclLLFifoLine:
    data1 flag1 data2 flag2), so a step carries half its slot."""

    protocol = "LL"
    LINE_NBYTES = 16
    WORD = np.uint32
    DATA, FLAGS, DATA_WORDS = slice(0, 4, 2), slice(1, 4, 2), 2


class LL128Ring(_LineRing):
    """LL128: 128-byte lines of fifteen 8-byte data words and one flag word, the line's last
    (NCCL_LL128_LINEELEMS 16, NCCL_LL128_DATAELEMS 15), so a step carries 15/16 of its slot."""

    protocol = "LL128"
    LINE_NBYTES = 128
    WORD = np.uint64
    DATA, FLAGS, DATA_WORDS = slice(0, 15), slice(15, 16), 15


_RING_OF = {"Simple": ShmRing, "LL": LLRing, "LL128": LL128Ring}
