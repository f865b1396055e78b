"""What crosses the process boundary: a Call (function name + inputs) goes in, an encoded value comes out.

A Call names a learner function and holds the inputs the grader built. Inputs the grader cannot or should not
pickle are placeholders, built inside the child: a seeded `Gen`, a `Scratch` path in the child's private
folder, an `Unpicklable` object. `execute` runs one Call against the learner's module (in the child, or
in-process for the course's pytest run) and `encode` turns the result into tensors, numbers, strings and
containers only, so the grader can read it with `torch.load(weights_only=True)`: a malicious pickle cannot run
code in the grader.
"""
import dataclasses
import functools
import io
import os
import pickle
import struct
import weakref
import zipfile

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

TAG = "__minilin__"  # marks an encoded non-plain value (an opaque object, a meta tensor, an expected exception)
MAX_DEPTH = 40
PLAIN = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.Size)


@dataclasses.dataclass(frozen=True)
class Call:
    """fn(*args, **kwargs) in the learner's module; `capture` says what to send back, `raises` which
    exception class names the check expects (then the exception is the result, not an error)."""
    fn: str
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    capture: str = "value"  # value | module:<i> (its state_dict) | matmul_shapes (+ largest) | each | load_kwargs
    raises: tuple = ()
    label: str = ""

    def describe(self):
        """How a failure message names this call, e.g. `attention(<2x2x5x4 float64>, ..., causal=True)`."""
        if self.label:
            return self.label
        if self.capture == "each":
            return f"{self.fn}(...) for {len(self.args[0])} inputs"
        parts = [summary(a) for a in self.args] + [f"{k}={summary(v)}" for k, v in self.kwargs.items()]
        return f"{self.fn}({', '.join(parts)})"


def summary(value):
    """A short, learner-readable rendering of an input: tensors by shape and dtype, the rest by repr."""
    if isinstance(value, torch.Tensor):
        shape = "x".join(map(str, value.shape)) or "scalar"
        return f"<{shape} {str(value.dtype).removeprefix('torch.')}>"
    if isinstance(value, torch.nn.Module):
        return f"<{type(value).__name__}>"
    if isinstance(value, (list, tuple)) and len(value) > 4:
        return f"<{type(value).__name__} of {len(value)}>"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# --- placeholders: built in the child -------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Gen:
    """torch.Generator().manual_seed(seed), made where the function runs."""
    seed: int

    def __repr__(self):
        return f"Generator(seed={self.seed})"


@dataclasses.dataclass(frozen=True)
class Scratch:
    """A path in this step's private scratch folder (empty when the step starts)."""
    name: str

    def __repr__(self):
        return f"'{self.name}'"


@dataclasses.dataclass(frozen=True)
class Unpicklable:
    """A checkpoint that fails half-way through pickling: a tensor, then a lambda."""

    def __repr__(self):
        return "{'w': <100 float32>, 'bad': <lambda>}"


class NotAWeight:
    """An arbitrary class: a checkpoint holding one must be refused by torch.load(weights_only=True)."""


_COPIES = {"scratch": None, "tensors": {}}


def _copy(tensor, scratch):
    """One copy of `tensor` per step (its scratch folder): learner code that writes into its input changes neither
    the caller's tensor (in-process runs share the built checks) nor another step's, while a step's second call
    on the same tensor still sees what the first wrote."""
    if _COPIES["scratch"] != scratch:
        _COPIES.update(scratch=scratch, tensors={})
    return _COPIES["tensors"].setdefault(id(tensor), (tensor, tensor.clone()))[1]


def resolve(value, scratch):
    if isinstance(value, torch.Tensor):
        return _copy(value, scratch)
    if isinstance(value, Gen):
        return torch.Generator().manual_seed(value.seed)
    if isinstance(value, Scratch):
        return os.path.join(scratch, value.name)
    if isinstance(value, Unpicklable):
        return {"w": torch.zeros(100), "bad": lambda: 0}
    if isinstance(value, tuple):
        return tuple(resolve(v, scratch) for v in value)
    if isinstance(value, list):
        return [resolve(v, scratch) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, scratch) for k, v in value.items()}
    return value


def _listdir(scratch):
    return sorted(os.listdir(scratch))


def _write_unsafe_pickle(path):
    torch.save({"obj": NotAWeight()}, path)


HARNESS = {"@listdir": _listdir, "@write_unsafe_pickle": _write_unsafe_pickle}  # grader-written helpers


class MissingFunction(AttributeError):
    """The learner's file does not define the function a task grades."""


class MatmulSpy(torch.overrides.TorchFunctionMode):
    """Records the (rows, cols) of every matrix-product result computed while active."""
    NAMES = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "einsum", "tensordot", "linear"}

    def __init__(self):
        super().__init__()
        self.products = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") in self.NAMES and isinstance(out, torch.Tensor) and out.ndim >= 2:
            self.products.append(tuple(out.shape[-2:]))
        return out


class LargestOp(TorchDispatchMode):
    """Records the most elements of any tensor an operator produces while active (views and in-place results
    included): an (N, M) score matrix built without a matrix product, by broadcasting, shows up here. Also the
    peak of live bytes (`peak_bytes`): each new storage an operator returns, counted until it is freed, as
    minilin.bench.LiveBytes counts them, so many small tensors kept alive at once show up too. And `ops`, the
    number of operators run (views included): a loop over tokens runs at least one per token. And `produced`, the
    elements of every new storage the operators return: the elementwise work, which a matrix formed by broadcasting
    shows as FLOPs do not."""

    def __init__(self):
        super().__init__()
        self.largest, self.live, self.current, self.peak_bytes, self.ops, self.produced = 0, {}, 0, 0, 0, 0

    def _free(self, key):
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        seen = {a.untyped_storage()._cdata for a in args if isinstance(a, torch.Tensor)}
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
                storage = t.untyped_storage()
                key = storage._cdata
                if key in seen or key in self.live:  # a view or an in-place result: no new memory
                    continue
                self.live[key] = storage.nbytes()
                self.produced += t.numel()
                self.current += self.live[key]
                self.peak_bytes = max(self.peak_bytes, self.current)
                weakref.finalize(storage, self._free, key)
        return out


def _capture(call, fn, args, kwargs):
    if call.capture == "value":
        return fn(*args, **kwargs)
    if call.capture == "each":
        return [fn(*a, **kw) for a, kw in args[0]]
    if call.capture == "matmul_shapes":
        with MatmulSpy() as spy, LargestOp() as sizes, FlopCounterMode(display=False) as flops:
            out = fn(*args, **kwargs)
        return {"products": spy.products, "shape": tuple(getattr(out, "shape", ())), "largest": sizes.largest,
                "peak_bytes": sizes.peak_bytes, "ops": sizes.ops, "produced": sizes.produced,
                "flops": flops.get_total_flops()}
    if call.capture == "load_kwargs":  # torch.load's arguments as passed: its weights_only default changed in 2.6
        real, seen = torch.load, []

        def spy(f, map_location=None, *rest, weights_only=None, **kw):
            seen.append({"weights_only": weights_only, "map_location": str(map_location)})
            return real(f, map_location, *rest, weights_only=weights_only, **kw)
        torch.load = spy
        try:
            return {"calls": seen, "value": fn(*args, **kwargs)}
        finally:
            torch.load = real
    if call.capture.startswith("module:"):
        i = int(call.capture.split(":")[1])
        out = fn(*args, **kwargs)
        return {"returned_input": out is args[i], "state": dict(args[i].state_dict())}
    raise ValueError(f"unknown capture {call.capture!r}")


def execute(module, call, scratch):
    """Run one Call: the encoded result, or an encoded expected exception; an unexpected exception propagates."""
    args, kwargs = resolve(call.args, scratch), resolve(call.kwargs, scratch)
    try:
        if call.fn.startswith("@"):
            value = HARNESS[call.fn](*args, **kwargs)
        else:
            fn = getattr(module, call.fn, None)
            if not callable(fn):
                raise MissingFunction(f"{os.path.basename(module.__file__ or '?')} defines no function "
                                      f"`{call.fn}`; keep the name and signature of the stub")
            value = _capture(call, fn, args, kwargs)
    except BaseException as err:  # SystemExit and KeyboardInterrupt from learner code are results too
        if call.raises and any(c.__name__ in call.raises for c in type(err).__mro__):
            return {TAG: "raised", "type": type(err).__name__, "message": _text(err)}
        raise
    return encode(value)


def _text(obj, limit=500):
    try:
        text = str(obj)
    except BaseException:  # a learner's __str__ may raise
        text = "<unprintable>"
    return text if len(text) <= limit else text[:limit] + "..."


def encode(value, depth=0):
    """Plain data only: tensors (compact CPU copies), numbers, strings, containers; the rest described."""
    if depth > MAX_DEPTH:
        return {TAG: "opaque", "type": "nesting", "repr": f"nested deeper than {MAX_DEPTH} levels"}
    if isinstance(value, torch.Tensor):
        if value.device.type == "meta":
            return {TAG: "meta", "shape": tuple(value.shape), "dtype": value.dtype}
        if value.layout != torch.strided:
            value = value.to_dense()
        # clone: a compact copy (a view would drag its whole storage along); as_subclass: plain Tensor
        return value.detach().cpu().resolve_conj().resolve_neg().clone().as_subclass(torch.Tensor)
    if type(value) in PLAIN:
        return value
    if isinstance(value, float):  # numpy.float64 is a float: a learner returning one meant a float
        return float(value)
    if type(value) in (tuple, list):
        return type(value)(encode(v, depth + 1) for v in value)
    if type(value) is dict and all(type(k) in (str, int) for k in value):
        return {k: encode(v, depth + 1) for k, v in value.items()}
    return {TAG: "opaque", "type": f"{type(value).__module__}.{type(value).__qualname__}", "repr": _text(
        repr_safe(value), 200)}


def repr_safe(value):
    try:
        return repr(value)
    except BaseException:
        return "<unprintable>"


@dataclasses.dataclass
class Opaque:
    """A returned object that is not plain data (a numpy array, a custom class): described, never unpickled."""
    type: str
    repr: str


@dataclasses.dataclass
class Raised:
    """An exception the check expected (e.g. ValueError for a too-long sequence)."""
    type: str
    message: str


@dataclasses.dataclass
class MetaTensor:
    shape: tuple
    dtype: torch.dtype


def decode(value):
    """Grader side: tagged dicts back into Opaque / Raised / MetaTensor."""
    if isinstance(value, dict):
        tag = value.get(TAG)
        if tag == "opaque":
            return Opaque(str(value.get("type")), str(value.get("repr")))
        if tag == "raised":
            return Raised(str(value.get("type")), str(value.get("message")))
        if tag == "meta":
            return MetaTensor(tuple(value.get("shape", ())), value.get("dtype"))
        return {k: decode(v) for k, v in value.items()}
    if type(value) in (tuple, list):
        return type(value)(decode(v) for v in value)
    return value


def dumps(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def loads_untrusted(data):
    """Read bytes the child wrote: weights_only, so only tensors and plain containers can come back; and
    parsed before it is inflated (check_frame), so no part can declare more memory than the frame holds."""
    check_frame(data)
    value = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    _check_views(value)
    return decode(value)


# --- a reply is parsed before anything in it is inflated -------------------------------------------------
MAX_PICKLE = 16 << 20  # bytes of a reply's pickle (its tensors' data are separate records)
MAX_ENTRIES = 100_000  # records in one reply (torch.save writes one per storage, and six more)


class ForgedFrame(ValueError):
    """A reply whose parts declare more than they hold (a compressed record, a storage larger than its data)."""


class _Stub:
    """What every global of a reply's pickle is while it is only scanned: calling or filling it does nothing."""
    __slots__ = ("name",)

    def __init__(self, name="?", *args, **kwargs):
        self.name = name

    def __call__(self, *args, **kwargs):
        return _Stub(self.name + "()")

    def __setitem__(self, key, value):
        pass

    def __setstate__(self, state):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass


class _Scan(pickle._Unpickler):
    """A pure-Python pass over the pickle that imports nothing, builds no tensor and records every storage it
    declares (its persistent ids): ('storage', <storage type>, key, location, element count)."""

    def __init__(self, data):
        super().__init__(io.BytesIO(data))
        self.storages = []

    def find_class(self, module, name):
        return _Stub(f"{module}.{name}")

    def persistent_load(self, pid):
        if len(self.storages) >= MAX_ENTRIES:
            raise ForgedFrame("too many storages")
        self.storages.append(pid)
        return _Stub("storage")


@functools.lru_cache(maxsize=1)
def _storage_itemsize():
    """{'torch.DoubleStorage': 8, ...}: the bytes per element of each storage type torch.save names."""
    sizes = {f"torch.{name}": dtype.itemsize for dtype, name in torch.storage._dtype_to_storage_type_map().items()}
    return {**sizes, "torch.UntypedStorage": 1, "torch.storage.UntypedStorage": 1}


def check_frame(data):
    """Raise ForgedFrame unless `data` is a torch.save archive whose every record is stored (not compressed),
    at most as large as the frame, and whose pickle declares no storage larger than the record that holds it:
    what torch.load then allocates is bounded by the frame's own size."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as err:
        raise ForgedFrame(f"not a torch.save archive ({type(err).__name__})") from None
    if not infos or len(infos) > MAX_ENTRIES:
        raise ForgedFrame("not a torch.save archive")
    sizes = {}
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size or \
                info.file_size > len(data) or info.filename in sizes:
            raise ForgedFrame(f"record {info.filename!r} is compressed, repeated or larger than the frame")
        sizes[info.filename] = info.file_size
    pickles = [name for name in sizes if name.endswith("/data.pkl") and name.count("/") == 1]
    if len(pickles) != 1 or sizes[pickles[0]] > MAX_PICKLE:
        raise ForgedFrame("no single pickle of a reply's size")
    prefix = pickles[0][:-len("data.pkl")]
    if any(not name.startswith(prefix) for name in sizes):
        raise ForgedFrame("records outside the archive's folder")
    scan = _Scan(archive.read(pickles[0]))
    try:
        scan.load()
    except ForgedFrame:
        raise
    except Exception as err:  # RecursionError, UnpicklingError, a stub where a class must be...
        raise ForgedFrame(f"its pickle cannot be read ({type(err).__name__})") from None
    itemsize = _storage_itemsize()
    for pid in scan.storages:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _Stub)
                and isinstance(pid[2], str) and type(pid[4]) is int and pid[4] >= 0):
            raise ForgedFrame("a storage that is not a tensor's")
        size = itemsize.get(pid[1].name)
        record = sizes.get(f"{prefix}data/{pid[2]}")
        if size is None or record is None or pid[4] * size > record:
            raise ForgedFrame(f"a storage declares {pid[4]} elements of {pid[1].name}; its record holds "
                              f"{record} bytes")


def _check_views(value, depth=0):
    """No tensor may show more elements than its storage holds (a stride-0 view of one number as a 10⁹-element
    tensor would be inflated by the first comparison)."""
    if depth > MAX_DEPTH + 5:
        raise ForgedFrame("nested too deep")
    if isinstance(value, torch.Tensor):
        if value.numel() * value.element_size() > value.untyped_storage().nbytes():
            raise ForgedFrame(f"a tensor of shape {tuple(value.shape)} over a storage of "
                              f"{value.untyped_storage().nbytes()} bytes")
    elif isinstance(value, (tuple, list)):
        for v in value:
            _check_views(v, depth + 1)
    elif isinstance(value, dict):
        for v in value.values():
            _check_views(v, depth + 1)


HEADER = struct.Struct(">cQ")  # frame kind (one byte) and payload length
MAX_FRAME = 64 << 20  # bytes: the largest result a learner's function may send back


def frame(kind, obj):
    data = dumps(obj)
    return HEADER.pack(kind, len(data)) + data
