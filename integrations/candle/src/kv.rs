//! The KV cache's storage: per layer, keys and values written in place, so
//! a pass copies only its own; truncation is a length (positions after it
//! are overwritten by the next pass).

use candle_core::Tensor;

/// One layer's cached keys and values, each `[kv_heads, positions, head_dim]`.
#[derive(Debug, Clone)]
pub struct LayerCache {
    /// Keys (after RoPE).
    pub k: Tensor,
    /// Values.
    pub v: Tensor,
}

/// One layer's KV buffers, `[kv_heads, capacity, head_dim]`, written in place
/// at the positions after the cache (a pass copies only its own keys and
/// values; the buffers double when full).
#[derive(Debug, Clone)]
pub(crate) struct KvBuffer {
    pub(crate) k: Tensor,
    pub(crate) v: Tensor,
}

impl KvBuffer {
    fn capacity(&self) -> candle_core::Result<usize> {
        self.k.dim(1)
    }

    /// Writes `k`, `v` (`[kv_heads, t, head_dim]`) at position `at` and
    /// returns the views of positions `..at + t`.
    pub(crate) fn write(
        slot: &mut Option<KvBuffer>,
        at: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> candle_core::Result<LayerCache> {
        let (heads, t, d) = k.dims3()?;
        let needed = at + t;
        let capacity = match slot {
            Some(b) => b.capacity()?,
            None => 0,
        };
        if needed > capacity {
            let cap = needed.max(2 * capacity).max(256).next_power_of_two();
            let grown = KvBuffer {
                k: Tensor::zeros((heads, cap, d), k.dtype(), k.device())?,
                v: Tensor::zeros((heads, cap, d), v.dtype(), v.device())?,
            };
            if let Some(old) = slot.as_ref() {
                grown
                    .k
                    .slice_set(&old.k.narrow(1, 0, at)?.contiguous()?, 1, 0)?;
                grown
                    .v
                    .slice_set(&old.v.narrow(1, 0, at)?.contiguous()?, 1, 0)?;
            }
            *slot = Some(grown);
        }
        let Some(buf) = slot.as_ref() else {
            candle_core::bail!("no KV buffer")
        };
        buf.k.slice_set(&k.contiguous()?, 1, at)?;
        buf.v.slice_set(&v.contiguous()?, 1, at)?;
        Ok(LayerCache {
            k: buf.k.narrow(1, 0, needed)?,
            v: buf.v.narrow(1, 0, needed)?,
        })
    }
}
