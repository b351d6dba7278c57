//! Diagnostic output: softrnic's tracing events (MPA exchanges, QP states, Terminates,
//! connection loss) on stderr, filtered RUST_LOG-style by target and level, e.g.
//! `RUST_LOG=softrnic_rnic=debug` or `--log softrnic_rnic::cm=info,softrnic_rnic::qp=debug`.
//! Nothing is installed without a filter, so the events then cost nothing.

use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

/// Parses a filter: comma-separated `target=level` directives (a target matches itself
/// and the targets below it), or a bare level for every target.
pub fn parse_filter(spec: &str) -> Result<Targets, String> {
    spec.parse::<Targets>()
        .map_err(|e| format!("log filter {spec:?}: {e}"))
}

/// Installs the stderr logger for `flag`, or else for the `RUST_LOG` variable; with
/// neither (or an empty one), installs nothing.
pub fn init(flag: Option<&str>) -> Result<(), String> {
    let env = std::env::var("RUST_LOG").ok();
    let Some(spec) = flag.or(env.as_deref()).filter(|s| !s.trim().is_empty()) else {
        return Ok(());
    };
    let targets = parse_filter(spec)?;
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(targets)
        .try_init()
        .map_err(|e| format!("log: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;
    use tracing_subscriber::filter::LevelFilter;

    #[test]
    fn filters_parse_by_target_and_level() {
        let t = parse_filter("softrnic_rnic=debug,softrnic_rnic::cm=warn").unwrap();
        assert!(t.would_enable("softrnic_rnic::qp", &Level::DEBUG));
        assert!(!t.would_enable("softrnic_rnic::qp", &Level::TRACE));
        assert!(t.would_enable("softrnic_rnic::cm", &Level::WARN));
        assert!(!t.would_enable("softrnic_rnic::cm", &Level::INFO));
        assert!(!t.would_enable("other", &Level::ERROR));
        let all = parse_filter("info").unwrap();
        assert_eq!(all.default_level(), Some(LevelFilter::INFO));
        assert!(all.would_enable("anything", &Level::INFO));
    }

    #[test]
    fn a_bad_filter_is_an_error() {
        assert!(parse_filter("softrnic_rnic=loud").is_err());
    }
}
