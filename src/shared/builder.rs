//! [`SharedBuilder`]: a [`Shared`] with a budget, from a memory file.

use super::{memory_file, Budget, Shared};
use crate::config::Config;
use crate::Error;

/// How to build a [`Shared`]: the budget, and a memory file to start from.
/// [`Shared::builder`] makes one with the defaults.
///
/// ```
/// use selfspec::{Budget, Config, Shared};
///
/// let config = Config::recommended();
/// let path = std::env::temp_dir().join(format!("selfspec-builder-{}.mem", std::process::id()));
/// # std::fs::remove_file(&path).ok();
/// // First start: no file yet, an empty memory.
/// let shared = Shared::builder()
///     .budget(Budget { memory: 64 << 20, ..Budget::default() })
///     .load_or_create(&path)
///     .build(&config)?;
/// shared.save(&path)?;
/// // Later starts: the file is loaded.
/// let warm = Shared::builder().load_or_create(&path).build(&config)?;
/// assert_eq!(warm.heap_bytes(), shared.heap_bytes());
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), selfspec::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct SharedBuilder {
    budget: Budget,
    file: Option<(std::path::PathBuf, bool)>,
}

impl SharedBuilder {
    /// recall's budgets (default [`Budget::default`]).
    pub fn budget(mut self, budget: Budget) -> SharedBuilder {
        self.budget = budget;
        self
    }

    /// Start from the memory file at `path` ([`Shared::save`]); it must exist.
    pub fn load(mut self, path: impl AsRef<std::path::Path>) -> SharedBuilder {
        self.file = Some((path.as_ref().to_path_buf(), true));
        self
    }

    /// Start from the memory file at `path` if it exists, empty otherwise
    /// (a server's first start).
    pub fn load_or_create(mut self, path: impl AsRef<std::path::Path>) -> SharedBuilder {
        self.file = Some((path.as_ref().to_path_buf(), false));
        self
    }

    /// The engine-wide state for `config` (its `pool_size` sizes ngram-mod's
    /// pool); nothing large is allocated until a sequence needs it, except
    /// what a file holds.
    ///
    /// # Errors
    ///
    /// An invalid `config` ([`Config::validate`]) or budget
    /// ([`Budget::validate`]); for a file, [`Error::MemoryFile`] naming the
    /// file and the byte offset: a missing file ([`load`](SharedBuilder::load)
    /// only) or one that cannot be read, is not a memory file, is of another
    /// format version, truncated, has a wrong checksum, or was built with
    /// other recall orders, or with another ngram-mod pool size when the
    /// chain has ngram-mod (a pool is ignored by a chain without it).
    pub fn build(self, config: &Config) -> Result<Shared, Error> {
        config.validate()?;
        self.budget.validate()?;
        let shared = Shared::with_parts(config, self.budget);
        if let Some((path, must_exist)) = &self.file {
            match std::fs::read(path) {
                Ok(bytes) => shared.restore(config, path, &bytes)?,
                Err(e) if !must_exist && e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(memory_file::io(path, e)),
            }
        }
        Ok(shared)
    }

    /// Like [`build`](SharedBuilder::build), starting from a memory file's
    /// bytes in memory ([`Shared::to_bytes`]; `name` labels errors), for an
    /// engine that stores them elsewhere. A file set with
    /// [`load`](SharedBuilder::load) is not read.
    ///
    /// # Errors
    ///
    /// As [`build`](SharedBuilder::build).
    pub fn build_from_bytes(
        self,
        config: &Config,
        name: impl AsRef<std::path::Path>,
        bytes: &[u8],
    ) -> Result<Shared, Error> {
        SharedBuilder { file: None, ..self }
            .build(config)
            .and_then(|shared| {
                shared.restore(config, name.as_ref(), bytes)?;
                Ok(shared)
            })
    }
}
