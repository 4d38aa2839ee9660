"""The page pool's attached storage: real K/V arrays behind the pool's page accounts.

A `PagePool` keeps accounts only (which pages each request holds) until `attach_storage`
gives it a `refimpl.kv.storage.KVStorage` in the attention kernels' layout; then `write` and
`read` move a request's K/V rows through its page table. `StorageAttachment` is a part of
`PagePool` (`refimpl.kv.pool`); the pool's operations call the storage's `on_*` hooks.
"""

from __future__ import annotations

import numpy as np

from refimpl.errors import KVCacheError
from refimpl.kv._checks import check_count
from refimpl.kv.storage import KVStorage

__all__ = ["StorageAttachment"]


class StorageAttachment:
    """`PagePool`'s K/V data: `attach_storage`, `write`, `read`.

    Uses the pool's `storage`, `num_pages`, `page_size`, `_slot_of`, `page_table` and
    `length`.
    """

    def attach_storage(self, num_layers: int, num_kv_heads: int, head_dim: int,
                       quantized_format: str = "int8") -> KVStorage:
        """Give the pool real K/V arrays in the kernels' layout; returns them."""
        if self._slot_of:
            raise KVCacheError("storage", "attach", "must be attached while the pool is empty")
        self.storage = KVStorage(
            check_count("num_layers", num_layers, 1), self.num_pages, self.page_size,
            check_count("num_kv_heads", num_kv_heads, 1),
            check_count("head_dim", head_dim, 1), quantized_format,
        )
        return self.storage

    def write(self, request_id: int, layer: int, start: int, k_rows: np.ndarray,
              v_rows: np.ndarray) -> None:
        """Store K/V rows (n, Hkv, d) of `layer` at positions [start, start + n)."""
        self._require_storage().write(request_id, self.page_table(request_id),
                                      self.length(request_id), layer, start, k_rows, v_rows)

    def read(self, request_id: int, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """The request's K and V rows of `layer`, float32 (length, Hkv, d)."""
        return self._require_storage().read(request_id, self.page_table(request_id),
                                            self.length(request_id), layer)

    def _require_storage(self) -> KVStorage:
        if self.storage is None:
            raise KVCacheError("storage", None, "this pool only keeps accounts; call "
                               "attach_storage() for real K/V arrays")
        return self.storage
