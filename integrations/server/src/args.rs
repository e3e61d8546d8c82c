//! The command line.

use std::path::PathBuf;

/// The help text.
pub const USAGE: &str = "\
usage: selfspec-server [--gguf PATH] [options]

An OpenAI-compatible chat completions server on llama.cpp, decoding with
selfspec's self-speculative drafts and continuous batching.

  --gguf PATH         the GGUF model (default: $SELFSPEC_MODEL, else the
                      model integrations/fetch-model.sh fetches)
  --parallel S        slots decoded together (default 4, at most 64)
  --host ADDR         address to listen on (default 127.0.0.1)
  --port N            port (default 8080; 0: any free port)
  --threads N         llama.cpp's CPU threads (default: the CPUs)
  --context N         tokens a slot holds, prompt and reply (default 4096)
  --kv-unified on|off one KV cache buffer for all slots (default off; with
                      one per slot, llama.cpp splits a step whose slots
                      send drafts of different lengths into several passes,
                      with one every slot attends over all slots' cells)
  --queue N           requests waiting for a slot at most (default 64);
                      beyond, 503 with Retry-After: 1
  --cache-ram MIB     host memory for the prompt cache: a slot's cache is
                      saved there before the slot takes another prompt, and
                      restored for a prompt of the same scope that starts
                      with it (default 2048; 0: off)
  --memory PATH       the engine-wide memory file: loaded at start if it
                      exists, saved every --save-every seconds and at exit
  --save-every SECS   seconds between saves (default 300; 0: at exit only)
  -h, --help          this text";

/// The server's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    /// The GGUF model, when given.
    pub gguf: Option<PathBuf>,
    /// Slots.
    pub parallel: usize,
    /// Address to listen on.
    pub host: String,
    /// Port.
    pub port: u16,
    /// llama.cpp's threads.
    pub threads: usize,
    /// Tokens a slot holds.
    pub context: usize,
    /// One KV cache buffer for all slots.
    pub kv_unified: bool,
    /// Requests waiting at most.
    pub queue: usize,
    /// The prompt cache's host memory, in MiB.
    pub cache_ram_mib: usize,
    /// The memory file.
    pub memory: Option<PathBuf>,
    /// Seconds between saves (0: at exit only).
    pub save_every: u64,
}

impl Default for Args {
    fn default() -> Args {
        Args {
            gguf: None,
            parallel: 4,
            host: "127.0.0.1".into(),
            port: 8080,
            threads: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            context: 4096,
            kv_unified: false,
            queue: 64,
            cache_ram_mib: 2048,
            memory: None,
            save_every: 300,
        }
    }
}

/// A bad command line: one line for the user.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    /// lexopt's (an unknown option, a missing or unreadable value).
    #[error(transparent)]
    Parse(#[from] lexopt::Error),
    /// A value that is not a number.
    #[error("{option} {value}: {error}")]
    Value {
        /// The option.
        option: &'static str,
        /// Its value.
        value: String,
        /// Why it is not one.
        error: String,
    },
    /// A value out of range.
    #[error("{option} {value}: {allowed}")]
    Range {
        /// The option.
        option: &'static str,
        /// Its value.
        value: String,
        /// What it may be.
        allowed: &'static str,
    },
}

/// Parses the arguments (without the program name); `None` for `--help`.
///
/// # Errors
///
/// [`ArgsError`] for an unknown option, a missing or unparsable value, or
/// a value out of range.
pub fn parse<I>(args: I) -> Result<Option<Args>, ArgsError>
where
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString>,
{
    use lexopt::prelude::*;
    let mut a = Args::default();
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("gguf") => a.gguf = Some(p.value()?.into()),
            Long("parallel") => a.parallel = number(&mut p, "--parallel")?,
            Long("host") => a.host = p.value()?.string()?,
            Long("port") => a.port = number(&mut p, "--port")?,
            Long("threads") => a.threads = number(&mut p, "--threads")?,
            Long("context") => a.context = number(&mut p, "--context")?,
            Long("queue") => a.queue = number(&mut p, "--queue")?,
            Long("cache-ram") => a.cache_ram_mib = number(&mut p, "--cache-ram")?,
            Long("kv-unified") => {
                a.kv_unified = match p.value()?.string()?.as_str() {
                    "on" => true,
                    "off" => false,
                    v => {
                        let v = v.to_string();
                        return Err(lexopt::Error::UnexpectedValue {
                            option: "--kv-unified".into(),
                            value: format!("{v} (on or off)").into(),
                        }
                        .into());
                    }
                }
            }
            Long("memory") => a.memory = Some(p.value()?.into()),
            Long("save-every") => a.save_every = number(&mut p, "--save-every")?,
            _ => return Err(arg.unexpected().into()),
        }
    }
    check(
        "--parallel",
        a.parallel,
        (1..=64).contains(&a.parallel),
        "from 1 to 64",
    )?;
    check(
        "--cache-ram",
        a.cache_ram_mib,
        a.cache_ram_mib <= 1 << 20,
        "from 0 to 1048576 MiB",
    )?;
    check(
        "--threads",
        a.threads,
        (1..=1024).contains(&a.threads),
        "from 1 to 1024",
    )?;
    let fits = a
        .context
        .checked_mul(a.parallel)
        .is_some_and(|n| n <= 1 << 24);
    check(
        "--context",
        a.context,
        a.context >= 16 && fits,
        "at least 16, and --context x --parallel at most 2^24",
    )?;
    Ok(Some(a))
}

/// The next value, as a number.
fn number<T>(p: &mut lexopt::Parser, option: &'static str) -> Result<T, ArgsError>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let value = lexopt::ValueExt::string(p.value()?)?;
    value.parse().map_err(|e: T::Err| ArgsError::Value {
        option,
        error: e.to_string(),
        value,
    })
}

fn check(
    option: &'static str,
    value: usize,
    ok: bool,
    allowed: &'static str,
) -> Result<(), ArgsError> {
    if ok {
        Ok(())
    } else {
        Err(ArgsError::Range {
            option,
            value: value.to_string(),
            allowed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_line(line: &str) -> Result<Option<Args>, ArgsError> {
        parse(line.split_whitespace())
    }

    #[test]
    fn defaults_and_every_option() {
        let a = parse_line("").unwrap().unwrap();
        assert_eq!(
            (a.parallel, a.port, a.context, a.queue, a.save_every),
            (4, 8080, 4096, 64, 300)
        );
        assert_eq!(a.cache_ram_mib, 2048);
        assert_eq!(
            parse_line("--cache-ram 0").unwrap().unwrap().cache_ram_mib,
            0
        );
        assert_eq!(a.host, "127.0.0.1");
        let a = parse_line(
            "--gguf m.gguf --parallel 2 --host 0.0.0.0 --port 0 --threads 3 --context 512 --queue 5 --memory x.bin --save-every 9",
        )
        .unwrap()
        .unwrap();
        assert_eq!(a.gguf, Some(PathBuf::from("m.gguf")));
        assert_eq!(
            (
                a.parallel,
                a.port,
                a.threads,
                a.context,
                a.queue,
                a.save_every
            ),
            (2, 0, 3, 512, 5, 9)
        );
        assert_eq!(a.memory, Some(PathBuf::from("x.bin")));
        assert_eq!(parse_line("--port=9000").unwrap().unwrap().port, 9000);
    }

    #[test]
    fn help_and_bad_arguments() {
        assert!(parse_line("--help").unwrap().is_none());
        assert!(parse_line("-h").unwrap().is_none());
        for bad in [
            "--nope",
            "--port",
            "--port x",
            "--port 70000",
            "--parallel 0",
            "--context 8",
            "--cache-ram 2000000",
            "--cache-ram -1",
            "stray",
        ] {
            let e = parse_line(bad).expect_err(bad).to_string();
            assert!(!e.is_empty() && !e.contains('\n'), "{bad}: {e}");
        }
    }
}
