//! Defaults of the `Config` fields a configuration file may leave out (those
//! of [`Config::default`]; a strategy's left-out parameters keep
//! [`Strategy::from_name`]'s defaults, from the table of strategies).

pub fn draft_max() -> usize {
    crate::DraftLimits::default().max
}
pub fn draft_min() -> usize {
    crate::DraftLimits::default().min
}
pub fn pool_size() -> usize {
    crate::limits::DEFAULT_POOL_SIZE
}
