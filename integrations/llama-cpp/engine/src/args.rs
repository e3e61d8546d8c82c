//! The command's arguments: the engine commands' shared options
//! ([`selfspec_conversations::cli`]) and llama.cpp's own.

use std::path::PathBuf;

use selfspec::step::Sampler;
use selfspec_conversations::cli::{self, CommonArgs};
use selfspec_llama_cpp_engine::run::Scopes;

/// `--help`'s text.
pub fn help() -> String {
    format!(
        "usage: selfspec-llama-cpp [options]
{}
  --parallel S           sequences decoded side by side in one batch (default 1)
  --threads N            llama.cpp's CPU threads (default: all cores)
  --context N            tokens one sequence's context holds (default 8192);
                         a turn whose prompt does not fit is skipped, counted
  --flash-attn on|off    llama.cpp's flash attention (default off: slower on
                         CPUs for passes under 64 tokens)
  --kv-unified on|off    one KV cache buffer for all sequences (default off;
                         with one per sequence, llama.cpp splits a batch of
                         uneven drafts into several passes, with one every
                         sequence attends over all sequences' cells)
  --budget on|off        selfspec's draft budget (default on): each pass keeps
                         the drafted tokens that pay for their rows, from pass
                         times learned as it decodes (it sets the token cost);
                         off: each set's drafts as its drafter sizes them
  --scopes kind|none     kind (default): each kind of conversation (chat, code,
                         code-edit) drafts on its own scope of a set's memory,
                         learning its own calibration; none: one for all
  --record FILE          write the plain replies as a replay workload (JSON
                         Lines, one session a conversation: each turn's prompt
                         and reply tokens; docs/replay.md), e.g. for gpu_sim
  --temperature T        sample every reply (plain and speculative) at
                         temperature T with llama.cpp's other defaults (top-k
                         40, top-p 0.95, min-p 0.05); replies then differ by
                         their draws and are not compared token for token
                         (default 0: greedy)
  --seed S               the first request's seed, the next ones' S + 1, ...
  --rounds N             decode each kind N times, plainly then with each set,
                         alternating (each round's sets on a new memory), and
                         report the rounds' tokens and times summed: on a
                         machine whose speed drifts, a kind's plain and
                         speculative times then come from the same minutes
                         (default 1)
  --in-step              plain decoding and each set's decode on contexts of
                         their own, one decoding step each in turn, on the
                         replies of a first plain pass (not counted): their
                         times come from the same moments of a machine whose
                         speed drifts, for ratios steadier than --rounds alone
  --pin-near-ties        with --in-step (greedy): every reply keeps the first
                         plain pass's token where its pass prefers another at
                         one of that pass's near ties (counted in the report),
                         so both halves decode the same tokens; replies that
                         differ there no longer end at other lengths, which
                         with many sequences a batch moves tokens/s more than
                         drafting does
  --pass-cost            print llama.cpp's pass-cost curve (1 to 63 tokens after
                         caches of 256, 2048 and 4096 tokens) and exit
The near-tie bound is measured at start: the largest shift of a top-1
margin between batched and one-token passes. Exit status: 0, every reply as plain decoding's
or different at a near tie; 3, a reply differs elsewhere; 1, an error;
2, a bad argument.",
        cli::COMMON_HELP
    )
}

/// Everything the command was given.
#[derive(Debug)]
pub struct Args {
    pub common: CommonArgs,
    pub parallel: usize,
    pub threads: Option<usize>,
    pub context: usize,
    pub pass_cost: bool,
    pub flash_attention: bool,
    /// `--kv-unified`: one KV cache buffer for all sequences.
    pub kv_unified: bool,
    /// `--budget`: whether selfspec's draft budget sizes the drafts.
    pub budget: bool,
    /// `--scopes`: which scope of a set's memory each conversation drafts on.
    pub scopes: Scopes,
    /// `--record`: where to write the plain replies as a replay workload.
    pub record: Option<PathBuf>,
    /// `--temperature`, `--seed`: sampled decoding.
    pub sampler: Option<Sampler>,
    /// `--rounds`: plain and speculative decoding of each kind, alternated.
    pub rounds: usize,
    /// `--in-step`: plain and speculative decoding step by step in turn.
    pub in_step: bool,
    /// `--pin-near-ties`: with `--in-step`, every reply decodes the history
    /// pass's tokens, kept at its near ties.
    pub pin_near_ties: bool,
}

/// Parses the arguments after the program's name.
pub fn parse(it: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut parallel, mut threads, mut context) = (1, None, 8192);
    let (mut pass_cost, mut flash_attention, mut budget) = (false, false, true);
    let mut kv_unified = false;
    let mut scopes = Scopes::Kind;
    let mut record = None;
    let mut rounds = 1;
    let (mut in_step, mut pin_near_ties) = (false, false);
    let (mut temperature, mut seed) = (0.0f32, 0u64);
    let common = cli::parse(it, |option, value| {
        match option {
            "--parallel" => {
                parallel = cli::positive(option, &value(option)?)?;
                if parallel > 64 {
                    return Err(format!("--parallel: {parallel} is over 64"));
                }
            }
            "--threads" => threads = Some(cli::positive(option, &value(option)?)?),
            "--context" => context = cli::positive(option, &value(option)?)?,
            "--pass-cost" => pass_cost = true,
            "--flash-attn" => flash_attention = on_off(option, &value(option)?)?,
            "--kv-unified" => kv_unified = on_off(option, &value(option)?)?,
            "--budget" => budget = on_off(option, &value(option)?)?,
            "--temperature" => {
                let v = value(option)?;
                temperature = v
                    .parse()
                    .ok()
                    .filter(|t: &f32| t.is_finite() && *t >= 0.0)
                    .ok_or(format!("{option}: {v:?} is not a temperature (0 or more)"))?;
            }
            "--seed" => {
                let v = value(option)?;
                seed = v
                    .parse()
                    .map_err(|_| format!("{option}: {v:?} is not a seed"))?;
            }
            "--rounds" => rounds = cli::positive(option, &value(option)?)?,
            "--in-step" => in_step = true,
            "--pin-near-ties" => pin_near_ties = true,
            "--record" => record = Some(PathBuf::from(value(option)?)),
            "--scopes" => {
                scopes = match value(option)?.as_str() {
                    "kind" => Scopes::Kind,
                    "none" => Scopes::None,
                    v => return Err(format!("{option}: {v:?} is not kind or none")),
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if pin_near_ties && (!in_step || temperature > 0.0) {
        return Err(
            "--pin-near-ties: needs --in-step (its history pass's replies are the \
                    reference) and greedy decoding (no --temperature)"
                .into(),
        );
    }
    Ok(Args {
        common,
        parallel,
        threads,
        context,
        pass_cost,
        flash_attention,
        kv_unified,
        budget,
        scopes,
        record,
        rounds,
        in_step,
        pin_near_ties,
        sampler: (temperature > 0.0).then(|| Sampler {
            temperature,
            seed,
            ..Sampler::default()
        }),
    })
}

/// `on` or `off` as a bool, or a message naming `option`.
fn on_off(option: &str, v: &str) -> Result<bool, String> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        v => Err(format!("{option}: {v:?} is not on or off")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_needs_in_step_and_greedy_decoding() {
        // (arguments, accepted)
        let cases: [(&[&str], bool); 5] = [
            (&["--in-step", "--pin-near-ties"], true),
            (&["--pin-near-ties", "--in-step"], true),
            (&["--pin-near-ties"], false),
            (
                &["--in-step", "--pin-near-ties", "--temperature", "0.7"],
                false,
            ),
            (
                &["--in-step", "--pin-near-ties", "--temperature", "0"],
                true,
            ),
        ];
        for (list, accepted) in cases {
            let parsed = parse(list.iter().map(|s| (*s).to_string()));
            assert_eq!(parsed.is_ok(), accepted, "{list:?}: {:?}", parsed.err());
            if let Ok(args) = parsed {
                assert!(args.pin_near_ties && args.in_step);
            }
        }
    }
}
