//! Errors that end the process with a chosen exit code.
//!
//! The worker tells a bad launch (exit 2: the command or config is wrong and retrying will not
//! help) from a failed run (exit 1), the way Python's argparse/pydantic and an uncaught
//! exception do for the real trainer.

use std::fmt;

/// Exit code for a wrong command line, environment or config.
pub const EXIT_USAGE: i32 = 2;
/// Exit code for a run that failed after it was set up correctly.
pub const EXIT_FAILURE: i32 = 1;

#[derive(Debug)]
pub struct Fatal {
    pub code: i32,
    pub message: String,
}

impl Fatal {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }

    pub fn failure(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_FAILURE,
            message: message.into(),
        }
    }
}

impl fmt::Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Fatal {}
