//! The runtime's one error type, grouped by category. Every variant carries the
//! context a user needs to act on it: the op, the shapes, the device, the file.

use std::fmt;

/// Status codes shared with PJRT, IREE and abseil (0–16). The C ABI hands these
/// out unchanged, so a frontend can map them to its own exception types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

impl Code {
    pub fn from_i32(v: i32) -> Code {
        use Code::*;
        match v {
            0 => Ok,
            1 => Cancelled,
            3 => InvalidArgument,
            4 => DeadlineExceeded,
            5 => NotFound,
            6 => AlreadyExists,
            7 => PermissionDenied,
            8 => ResourceExhausted,
            9 => FailedPrecondition,
            10 => Aborted,
            11 => OutOfRange,
            12 => Unimplemented,
            13 => Internal,
            14 => Unavailable,
            15 => DataLoss,
            16 => Unauthenticated,
            _ => Unknown,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Clone: an error from asynchronous work is reported on every event recorded
/// after it and at the next synchronize, so it is copied, not moved.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    // --- device runtime (PJRT) ---------------------------------------------
    /// A PJRT call returned an error; `call` is the C API function.
    #[error("PJRT {call} failed [{code}]: {message}")]
    Pjrt { call: &'static str, code: Code, message: String },

    /// No PJRT plugin could be found; `tried` lists every place we looked.
    #[error(
        "no PJRT plugin found. Tried:\n  {}\nActivate the Python environment that has one (`source \
         .venv/bin/activate`, or set VIRTUAL_ENV), install the default CPU plugin with `scripts/setup.sh` \
         (or `pip install xla-cpu-pjrt`), or point TORCHTPU_PJRT_PLUGIN at a plugin .so",
        tried.join("\n  ")
    )]
    PluginNotFound { tried: Vec<String> },

    /// The plugin library could not be opened or is not a usable PJRT plugin.
    #[error("PJRT plugin {path}: {message}")]
    PluginLoad { path: String, message: String },

    /// StableHLO that PJRT refused to compile. Carries the whole program so
    /// the failure can be reproduced outside the runtime; the message shows
    /// an excerpt of a long one ([`program_excerpt`]) and the file the whole
    /// program was saved to (`saved`, see [`Error::compile`]).
    #[error("compiling {what} failed: {message}\n--- StableHLO ---\n{}", program_excerpt(program, saved.as_deref()))]
    Compile { what: String, message: String, program: String, saved: Option<std::path::PathBuf> },

    /// The key-value store a multi-process client rendezvouses through
    /// failed (a frontend's store: its code is kept).
    #[error("{message}")]
    KeyValue { code: Code, message: String },

    // --- host I/O ----------------------------------------------------------
    /// A file operation failed (the compile cache directory, for example).
    #[error("{path}: {source}")]
    Io { path: String, source: std::sync::Arc<std::io::Error> },

    // --- user input --------------------------------------------------------
    #[error("unknown op '{name}'{hint}")]
    UnknownOp { name: String, hint: String },

    /// Wrong arguments for an op: shapes that do not broadcast, a dim out of
    /// range, a missing argument. `msg` names the shapes involved.
    #[error("{op}: {msg}")]
    Op { op: String, msg: String },

    /// An index or target out of its valid range, found on the device by an
    /// index check (see `Runtime::set_index_checks`). `msg` names the bad
    /// value and the valid range.
    #[error("{op}: {msg}")]
    IndexOutOfRange { op: String, msg: String },

    #[error("{op}: dtype {dtype} is not supported{detail}")]
    UnsupportedDType { op: String, dtype: String, detail: String },

    #[error("device index {index} is out of range: the {platform} client has {count} device(s){}", valid_devices(.count))]
    DeviceOutOfRange { index: i64, count: usize, platform: String },

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    #[error("{0}")]
    Unimplemented(String),

    /// Something asked for does not exist (yet).
    #[error("{0}")]
    NotFound(String),

    /// A caller-provided buffer or a limit is too small.
    #[error("{0}")]
    ResourceExhausted(String),

    #[error("internal error: {0}")]
    Internal(String),

    /// The call is valid, but not in the current state: an event that has
    /// not completed yet, a wait that would deadlock.
    #[error("{0}")]
    FailedPrecondition(String),

    /// A bounded wait ended before what it waited for (a shutdown whose
    /// work was still running).
    #[error("{0}")]
    DeadlineExceeded(String),

    // --- WebAssembly plugins ------------------------------------------------
    /// A WebAssembly plugin failed while lowering `op` or deciding a fusion
    /// cut. `kind` says how; the plugin is discarded and reinstantiated, so
    /// the runtime and the other plugins are unaffected.
    #[error("plugin '{plugin}'{}: {kind}: {message}", op.as_ref().map(|o| format!(" (op {o})")).unwrap_or_default())]
    WasmPlugin { plugin: String, op: Option<String>, kind: PluginFailure, message: String },

    /// A `.wasm` file that was not loaded (bad manifest, ABI version,
    /// duplicate name, forbidden import, ...). The other files still load.
    #[error("plugin file {path}: {message}")]
    WasmPluginRejected { path: String, message: String },

    /// An error from the device while running `op` (keeps the inner code).
    #[error("{op}: {source}")]
    InOp { op: String, source: Box<Error> },
}

/// The valid device indices of a client with `count` devices, as a message
/// tail: " (valid: 0 to 3)", " (valid: 0)", or " (none is valid)".
fn valid_devices(count: &usize) -> String {
    match *count {
        0 => " (none is valid)".to_string(),
        1 => " (valid: 0)".to_string(),
        n => format!(" (valid: 0 to {})", n - 1),
    }
}

impl Error {
    pub fn code(&self) -> Code {
        match self {
            Error::Pjrt { code, .. } => *code,
            Error::PluginNotFound { .. } => Code::NotFound,
            Error::PluginLoad { .. } => Code::FailedPrecondition,
            Error::Compile { .. } => Code::Internal,
            Error::KeyValue { code, .. } => *code,
            Error::Io { source, .. } => match source.kind() {
                std::io::ErrorKind::NotFound => Code::NotFound,
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => Code::PermissionDenied,
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => Code::ResourceExhausted,
                _ => Code::Unavailable,
            },
            Error::UnknownOp { .. } => Code::NotFound,
            Error::Op { .. } | Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::UnsupportedDType { .. } => Code::Unimplemented,
            Error::DeviceOutOfRange { .. } | Error::IndexOutOfRange { .. } => Code::OutOfRange,
            Error::Unimplemented(_) => Code::Unimplemented,
            Error::ResourceExhausted(_) => Code::ResourceExhausted,
            Error::NotFound(_) => Code::NotFound,
            Error::Internal(_) => Code::Internal,
            Error::FailedPrecondition(_) => Code::FailedPrecondition,
            Error::DeadlineExceeded(_) => Code::DeadlineExceeded,
            Error::InOp { source, .. } => source.code(),
            Error::WasmPlugin { kind, .. } => kind.code(),
            Error::WasmPluginRejected { .. } => Code::InvalidArgument,
        }
    }

    /// Attributes an error from the device to `op`.
    pub fn in_op(self, op: &str) -> Error {
        match self {
            e @ (Error::Op { .. }
            | Error::InOp { .. }
            | Error::IndexOutOfRange { .. }
            | Error::Compile { .. }
            | Error::WasmPlugin { .. }) => e,
            e => Error::InOp { op: op.to_string(), source: Box::new(e) },
        }
    }

    /// A compile failure of `program` (not yet saved: see [`Error::saving_program`]).
    pub fn compile(what: impl Into<String>, message: impl Into<String>, program: &str) -> Error {
        Error::Compile { what: what.into(), message: message.into(), program: program.to_string(), saved: None }
    }

    /// A compile failure whose program is too long to show whole, with the
    /// program saved to a file in `dir` ([`save_failed_program`]) that the
    /// message names; any other error as it is.
    pub fn saving_program(self, dir: &std::path::Path) -> Error {
        match self {
            Error::Compile { what, message, program, saved: None } if program.lines().count() > EXCERPT_HEAD + EXCERPT_TAIL + 1 => {
                let saved = save_failed_program(dir, &program);
                Error::Compile { what, message, program, saved }
            }
            e => e,
        }
    }

    /// An argument error attributed to `op`.
    pub fn op(op: impl Into<String>, msg: impl Into<String>) -> Error {
        Error::Op { op: op.into(), msg: msg.into() }
    }
}

/// How a WebAssembly plugin call failed. Each is a distinct, named error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PluginFailure {
    /// The guest trapped: `unreachable`, a bad memory access, a stack
    /// overflow, a Rust panic.
    Trap,
    /// The call used up its fuel (an endless loop, usually).
    OutOfFuel,
    /// The call ran past its wall-clock deadline.
    Timeout,
    /// The guest asked for more linear memory than its limit.
    OutOfMemory,
    /// The response was out of bounds, too large, not UTF-8, or not the
    /// JSON the ABI defines.
    InvalidOutput,
    /// The StableHLO fragment broke the fragment rules or did not compile.
    InvalidStableHlo,
    /// The fragment's signature or declared outputs disagree with the
    /// call's inputs or the op's schema.
    SignatureMismatch,
    /// The plugin itself reported an error (`{"err": ...}`), e.g. shapes it
    /// does not support.
    Reported,
    /// The module could not be instantiated.
    Instantiate,
    /// The fragment's loops ran past their iteration bound on the device.
    LoopBound,
}

impl PluginFailure {
    pub fn name(self) -> &'static str {
        match self {
            PluginFailure::Trap => "trap",
            PluginFailure::OutOfFuel => "out of fuel",
            PluginFailure::Timeout => "timeout",
            PluginFailure::OutOfMemory => "out of memory",
            PluginFailure::InvalidOutput => "invalid output",
            PluginFailure::InvalidStableHlo => "invalid StableHLO",
            PluginFailure::SignatureMismatch => "signature mismatch",
            PluginFailure::Reported => "error",
            PluginFailure::Instantiate => "instantiation failed",
            PluginFailure::LoopBound => "loop bound exceeded",
        }
    }

    pub fn code(self) -> Code {
        match self {
            PluginFailure::Trap => Code::Aborted,
            PluginFailure::OutOfFuel | PluginFailure::Timeout | PluginFailure::LoopBound => Code::DeadlineExceeded,
            PluginFailure::OutOfMemory => Code::ResourceExhausted,
            PluginFailure::Reported => Code::InvalidArgument,
            PluginFailure::InvalidOutput
            | PluginFailure::InvalidStableHlo
            | PluginFailure::SignatureMismatch
            | PluginFailure::Instantiate => Code::Internal,
        }
    }
}

impl fmt::Display for PluginFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Early-returns an [`Error::Op`] for the op in scope: `bail_op!(op, "dim {} out of range", d)`.
#[macro_export]
macro_rules! bail_op {
    ($op:expr, $($fmt:tt)+) => {
        return Err($crate::error::Error::op($op, format!($($fmt)+)))
    };
}

/// Lines of a long program an error shows before and after the cut.
const EXCERPT_HEAD: usize = 40;
const EXCERPT_TAIL: usize = 10;

/// A long program's first and last lines, with how many were left out and
/// where the whole program is (`saved`): an error message that pastes a
/// 2,000-line fused graph hides its first line.
pub fn program_excerpt(program: &str, saved: Option<&std::path::Path>) -> String {
    let lines: Vec<&str> = program.lines().collect();
    if lines.len() <= EXCERPT_HEAD + EXCERPT_TAIL + 1 {
        return program.to_string();
    }
    let whole = match saved {
        Some(path) => format!("the whole program is in {}", path.display()),
        None => "TORCHTPU_LOG=trace prints whole programs".to_string(),
    };
    format!(
        "{}\n... ({} lines left out; {whole})\n{}",
        lines[..EXCERPT_HEAD].join("\n"),
        lines.len() - EXCERPT_HEAD - EXCERPT_TAIL,
        lines[lines.len() - EXCERPT_TAIL..].join("\n")
    )
}

/// Writes `program` to `dir/<hash of the program>.mlir` (once: the same
/// program keeps its file) and returns the path; None, logged, if the file
/// cannot be written, as the error itself matters more than its attachment.
pub fn save_failed_program(dir: &std::path::Path, program: &str) -> Option<std::path::PathBuf> {
    use std::hash::{Hash, Hasher};
    // DefaultHasher::new() has fixed keys: the name is stable across runs.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    program.hash(&mut h);
    let path = dir.join(format!("{:016x}.mlir", h.finish()));
    if path.is_file() {
        return Some(path);
    }
    let written = std::fs::create_dir_all(dir).and_then(|()| {
        // Written whole under a temporary name, then renamed: a reader never
        // sees half a program.
        let tmp = dir.join(format!(".{}.{}.tmp", std::process::id(), h.finish()));
        std::fs::write(&tmp, program)?;
        std::fs::rename(&tmp, &path)
    });
    match written {
        Ok(()) => Some(path),
        Err(e) => {
            tracing::debug!("cannot save the failed program to {}: {e}", path.display());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_program_is_shown_as_an_excerpt_and_saved_whole() {
        let short: String = (0..51).map(|i| format!("line {i}\n")).collect();
        assert_eq!(program_excerpt(&short, None), short);
        let long: String = (0..2000).map(|i| format!("line {i}")).collect::<Vec<_>>().join("\n");
        let dir = std::env::temp_dir().join(format!("ttpu-excerpt-test-{}", std::process::id()));
        let saved = save_failed_program(&dir, &long).expect("saved");
        assert_eq!(std::fs::read_to_string(&saved).unwrap(), long, "the file holds the whole program");
        assert_eq!(save_failed_program(&dir, &long), Some(saved.clone()), "one file per program");
        let e = Error::Compile { what: "fused graph (900 ops)".into(), message: "bad".into(), program: long.clone(), saved: Some(saved.clone()) };
        let text = e.to_string();
        let cut = format!("line 39\n... (1950 lines left out; the whole program is in {})\n", saved.display());
        assert!(text.contains("line 0\n") && text.contains(&cut), "{text}");
        assert!(text.ends_with("line 1999") && !text.contains("line 40\n") && !text.contains("line 1989\n"));
        // The whole program also stays in the error.
        assert!(matches!(e, Error::Compile { program, .. } if program == long));
        // Unsaved, the message says how to see it.
        assert!(program_excerpt(&long, None).contains("TORCHTPU_LOG=trace prints whole programs"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
