"""Dev/evaluation only: what per-kv-head block lists would do to sparse quality (issue 13).

Patches `SparseColdStep.fetch`/`attend_fetched` (eager steps only: run with enforce_eager=true,
sparse_cache_seqs=0) so that, per layer and sequence, SPARSE_LISTS picks the blocks:
  shared  - the engine's list: one union list of `budget` blocks for every kv head (`select_from_keys`)
  perhead - each kv head attends its own top `budget` blocks by its own ranking keys
and every kv head attends exactly its list's keys (fp32 torch). Same bytes per head
and step as a head-granular gather would move; the union of the heads' lists is gathered here.
Then runs eval_drv.py with the remaining arguments."""
import os
import runpy
import sys

import torch

from kvspill.kv import cold_sparse
from kvspill.kv.cold_math import merge_rows_into
from kvspill.kv.sparse_select import select_from_keys

MODE = os.environ.get("SPARSE_LISTS", "perhead")


def fetch(self, layer_idx, q_cold):
    q = q_cold.index_select(0, self.rows)
    layout = self.storage.layout
    out = []
    for i, seq in enumerate(self.seqs):
        keys = self._keys(seq, layer_idx, q[i])  # [kv, n], larger first
        k = seq.num_selected
        if MODE == "perhead":
            lists = keys.topk(k, dim=1).indices.sort(dim=1).values  # [kv, k]
        else:
            lists = select_from_keys(keys, k, seq.positions)[None].expand(keys.shape[0], k)
        union = torch.unique(lists)  # ascending
        dst = torch.empty((len(union), 2, layout.block_size, layout.num_kv_heads, layout.row_dim),
                          dtype=layout.dtype, device=self.storage.device)
        self._gather(seq, layer_idx, union, dst)
        out.append((dst, torch.searchsorted(union, lists)))
        self.counts.selected_blocks += k
        self.counts.cold_blocks += seq.num_cold
    return (q, out)


def attend_fetched(self, layer_idx, fetched, scale, acc_o, acc_lse):
    q, out = fetched
    os_, ls_ = [], []
    for i, (dst, pos) in enumerate(out):
        kv, dim = dst.shape[3], dst.shape[4]
        blocks = dst[pos]  # [kv(list), k, 2, bs, kv(data), dim]: each head's list, all heads' data
        mine = torch.diagonal(blocks, dim1=0, dim2=4)  # [k, 2, bs, dim, kv]: head h's data of list h
        mine = mine.permute(4, 1, 0, 2, 3).reshape(kv, 2, -1, dim).float()  # [kv, 2, k * bs, dim]
        qh = q[i].float().view(kv, -1, dim)  # [kv, group, dim]
        scores = torch.bmm(qh, mine[:, 0].transpose(1, 2)) * scale  # [kv, group, k * bs]
        lse = torch.logsumexp(scores, dim=-1)
        o = torch.bmm((scores - lse[..., None]).exp(), mine[:, 1])  # [kv, group, dim]
        os_.append(o.reshape(1, -1, dim))
        ls_.append(lse.reshape(1, -1))
    merge_rows_into(acc_o, acc_lse, self.rows, torch.cat(os_), torch.cat(ls_))


def attend(self, layer_idx, q_cold, scale, acc_o, acc_lse):
    attend_fetched(self, layer_idx, fetch(self, layer_idx, q_cold), scale, acc_o, acc_lse)


cold_sparse.SparseColdStep.fetch = fetch
cold_sparse.SparseColdStep.attend_fetched = attend_fetched
cold_sparse.SparseColdStep.attend = attend
print("sparse lists:", MODE, flush=True)
drv = sys.argv[1]
sys.argv = [drv, *sys.argv[2:]]
runpy.run_path(drv, run_name="__main__")
