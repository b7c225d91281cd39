"""The durable process store (RocksDB): history of record, derived indexes, durable handles.

    from svit.store import ProcessStore
    store = ProcessStore.open("/path/to/store")
    h = store.create(process)            # or import_, resume, fork
    h.exec("/lib/counter", {"by": 1})    # acknowledged only after a synced write
    h.query(path_prefix="/memory"); h.store_snapshot(); h.cut()
    h.at(3).read("/memory/count"); h.diff(3, 7)   # retained versions, from stored chunks

See :mod:`svit.store.store` for the contract, :mod:`svit.store.keys` for the layout and
:mod:`svit.store.engine` for the storage engine interface (``ProcessStore.over(engine)``).
"""

from .diff import Difference
from .engine import StorageEngine, WriteBatch
from .keys import IRREPLACEABLE, KEY_CLASSES, REBUILDABLE, KeyClass
from .receipts import StoreReceipts
from .rocksdb import RocksDBEngine
from .store import DurableProcess, Head, ProcessStore, StoreSnapshot, Transaction, apply_mutations
from .versions import VersionView

__all__ = [
    "ProcessStore",
    "StorageEngine",
    "WriteBatch",
    "RocksDBEngine",
    "DurableProcess",
    "Difference",
    "VersionView",
    "StoreReceipts",
    "StoreSnapshot",
    "Transaction",
    "Head",
    "KeyClass",
    "KEY_CLASSES",
    "IRREPLACEABLE",
    "REBUILDABLE",
    "apply_mutations",
]
