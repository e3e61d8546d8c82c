//! The drafting configuration from command-line strategies.

use selfspec::{Config, Strategy};

use crate::Error;

/// The configuration for `--strategy` values as the replay tool takes them
/// (`NAME[:key=value,...]`; several form a chain, first non-empty draft
/// wins; none means [`Config::recommended`]) and the optional `--draft-max` /
/// `--draft-min`.
///
/// ```
/// let c = selfspec_conversations::config(&["ngram-mod:n=24".into()], Some(64), Some(48))?;
/// assert_eq!((c.draft_min, c.draft_max), (48, 64));
/// assert!(selfspec_conversations::config(&["no-such".into()], None, None).is_err());
/// # Ok::<(), selfspec_conversations::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Config`] for an unknown strategy, a bad parameter or limits the
/// configuration rejects.
pub fn config(
    strategies: &[String],
    draft_max: Option<usize>,
    draft_min: Option<usize>,
) -> Result<Config, Error> {
    Ok(chain_config(strategies, draft_max, draft_min)?)
}

/// [`config`], with selfspec's error.
pub(crate) fn chain_config(
    strategies: &[String],
    draft_max: Option<usize>,
    draft_min: Option<usize>,
) -> Result<Config, selfspec::Error> {
    let mut config = if strategies.is_empty() {
        Config::recommended()
    } else {
        let chain = strategies
            .iter()
            .map(|s| s.parse::<Strategy>())
            .collect::<Result<Vec<_>, _>>()?;
        Config::new(chain)
    };
    config.draft_max = draft_max.unwrap_or(config.draft_max);
    config.draft_min = draft_min.unwrap_or(config.draft_min);
    config.validate()?;
    Ok(config)
}

/// A short label for a chain: the strategies as given, joined by `+`
/// (`recall` when none is given).
#[must_use]
pub fn strategy_label(strategies: &[String]) -> String {
    if strategies.is_empty() {
        "recall".to_string()
    } else {
        strategies.join("+")
    }
}
