//! Conversions between integer and float types, in one place (as
//! aho-corasick's `util/int.rs` does): the library's casts go through these
//! helpers, each named for what it assumes, so a lossy one is easy to audit.
//!
//! Positions and lengths are `u64` in the indexes and memories and `usize`
//! in slices; every supported target has a `usize` of at most 64 bits, and
//! histories, capacities and tables stay far below 2^32 entries.

/// `x` as a `u64`: lossless on every target with a `usize` of at most 64
/// bits (all that Rust supports today).
#[inline(always)]
pub(crate) const fn wide(x: usize) -> u64 {
    x as u64
}

/// A logical position or a length as a slice index, saturating (positions
/// stay far below 2^32: capacities are at most 2^30 tokens).
#[inline(always)]
pub(crate) fn ix(x: u64) -> usize {
    usize::try_from(x).unwrap_or(usize::MAX)
}

/// A 32-bit count or index as a slice index (lossless on every target
/// with a `usize` of at least 32 bits).
#[inline(always)]
pub(crate) const fn ix32(x: u32) -> usize {
    x as usize
}

/// A small count (a match length, a candidate index, a position in an index
/// of at most 2^30 tokens) in 32 bits, saturating.
#[inline(always)]
pub(crate) fn small(x: usize) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// A slice index the caller keeps below 2^32, in 32 bits, unchecked (a
/// truncation if it were not): for the hot loops where [`small`]'s check
/// costs (the position index's re-chain).
#[inline(always)]
#[allow(clippy::cast_possible_truncation)] // bounded by the caller
pub(crate) const fn index32(x: usize) -> u32 {
    x as u32
}

/// The low 32 bits of `x` (a truncation, on purpose: a position stored in a
/// 32-bit cell, a hash's low half).
#[inline(always)]
pub(crate) const fn low32(x: u64) -> u32 {
    (x & 0xFFFF_FFFF) as u32
}

/// The high 32 bits of `x`.
#[inline(always)]
pub(crate) const fn high32(x: u64) -> u32 {
    low32(x >> 32)
}

/// The two halves of `m` xor-ed (a folded multiply's result).
#[inline(always)]
#[allow(clippy::cast_possible_truncation)] // each half on purpose
pub(crate) const fn fold128(m: u128) -> u64 {
    (m as u64) ^ ((m >> 64) as u64)
}

/// A non-negative whole float as an integer, saturating (a count read
/// back from a file, checked whole before).
#[inline(always)]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // checked by the caller
pub(crate) fn whole(x: f64) -> u64 {
    x as u64
}

/// A count as a float: exact below 2^53, which every count here is.
#[inline(always)]
pub(crate) fn float(x: usize) -> f64 {
    x as f64
}

/// A 64-bit count as a float: exact below 2^53.
#[inline(always)]
pub(crate) fn float64(x: u64) -> f64 {
    x as f64
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (584 years).
#[inline]
pub(crate) fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A probability or weight computed in `f64` as the `f32` a row holds
/// (rounded to the nearest; the rows are `f32`).
#[inline(always)]
#[allow(clippy::cast_possible_truncation)] // rounding to f32 on purpose
pub(crate) fn narrow(x: f64) -> f32 {
    x as f32
}
