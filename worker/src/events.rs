//! The trainer's report lines: `PODQ {"event": ...}` on host 0's stdout.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum TrainerEvent {
    Metrics {
        step: i64,
        /// A NaN or infinite value is the string `"NaN"`, `"Infinity"` or `"-Infinity"`
        /// (`podq_api::nonfinite`): the SDK reports a diverged loss as what it is.
        #[serde(with = "podq_api::nonfinite::map")]
        values: BTreeMap<String, f64>,
    },
    Checkpoint {
        step: i64,
        uri: String,
    },
    /// The start or end of something only the trainer sees (`podq_trainer.phase`).
    Phase {
        phase: TrainerPhase,
        edge: PhaseEdge,
        #[serde(default)]
        step: Option<i64>,
        /// When the worker read the line off the agent's stream: phases are timed by it, not
        /// by when the attempt's loop gets to the event.
        #[serde(skip)]
        received: Option<tokio::time::Instant>,
    },
    /// The seconds JAX spent compiling (or loading from its cache) before the first step,
    /// as the SDK's listener on JAX's own compile events summed them: for a trainer that
    /// does not mark its compile with a phase.
    Compiled {
        seconds: f64,
    },
    /// Where the run lives elsewhere (`podq_trainer.report_link`), e.g. its W&B run. Checked
    /// with `JobLink::problem` before it is sent on.
    Link {
        name: String,
        url: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrainerPhase {
    Compile,
    Restore,
    Save,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PhaseEdge {
    Start,
    End,
}

pub const PREFIX: &str = "PODQ ";

/// Parses one stdout line. `None` for ordinary log lines; `Some(Err)` for a line that starts
/// like a report but is not one (worth a warning, never a crash).
pub fn parse_line(line: &str) -> Option<Result<TrainerEvent, String>> {
    let payload = line.strip_prefix(PREFIX)?;
    Some(
        serde_json::from_str(payload.trim())
            .map_err(|e| format!("unreadable PODQ line ({e}): {line}")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_two_report_lines_and_ignores_logs() {
        let metrics =
            parse_line(r#"PODQ {"event":"metrics","step":1200,"values":{"train/lm_loss":0.53}}"#);
        assert_eq!(
            metrics,
            Some(Ok(TrainerEvent::Metrics {
                step: 1200,
                values: [("train/lm_loss".to_owned(), 0.53)].into()
            }))
        );
        let checkpoint =
            parse_line(r#"PODQ {"event":"checkpoint","step":5000,"uri":"gs://b/step_5000"}"#);
        assert!(matches!(
            checkpoint,
            Some(Ok(TrainerEvent::Checkpoint { step: 5000, .. }))
        ));
        assert_eq!(
            parse_line(r#"PODQ {"event":"phase","phase":"save","edge":"end","step":5000}"#),
            Some(Ok(TrainerEvent::Phase {
                phase: TrainerPhase::Save,
                edge: PhaseEdge::End,
                step: Some(5000),
                received: None,
            }))
        );
        assert!(matches!(
            parse_line(r#"PODQ {"event":"phase","phase":"lunch","edge":"start"}"#),
            Some(Err(_))
        ));
        let diverged = parse_line(
            r#"PODQ {"event":"metrics","step":60,"values":{"train/loss":"NaN","train/lm_loss":"Infinity"}}"#,
        );
        let Some(Ok(TrainerEvent::Metrics { values, .. })) = diverged else {
            panic!("{diverged:?}");
        };
        assert!(values["train/loss"].is_nan());
        assert_eq!(values["train/lm_loss"], f64::INFINITY);
        assert!(matches!(
            parse_line(r#"PODQ {"event":"metrics","step":1,"values":{"x":"lots"}}"#),
            Some(Err(_))
        ));
        assert_eq!(
            parse_line(
                r#"PODQ {"event":"link","name":"wandb","url":"https://wandb.ai/t/p/runs/x"}"#
            ),
            Some(Ok(TrainerEvent::Link {
                name: "wandb".into(),
                url: "https://wandb.ai/t/p/runs/x".into(),
            }))
        );
        // A link without its url is unreadable, like any report line missing a field.
        assert!(matches!(
            parse_line(r#"PODQ {"event":"link","name":"wandb"}"#),
            Some(Err(_))
        ));
        assert_eq!(
            parse_line(r#"PODQ {"event":"compiled","seconds":3.25}"#),
            Some(Ok(TrainerEvent::Compiled { seconds: 3.25 }))
        );
        assert_eq!(parse_line("step 10 loss 0.5"), None);
        assert!(matches!(parse_line("PODQ {not json"), Some(Err(_))));
    }
}
