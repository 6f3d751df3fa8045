//! A run's results: a table per section for people, JUnit XML for CI and a JSON summary for
//! scripts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::framework::{Failure, Section};
use crate::Profile;

/// How one check ended.
#[derive(Clone, Debug)]
pub enum Outcome {
    Passed,
    Failed(Failure),
    Skipped(String),
}

impl Outcome {
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed(_) => "FAILED",
            Outcome::Skipped(_) => "skipped",
        }
    }
}

/// One check's result.
#[derive(Clone, Debug)]
pub struct CheckReport {
    pub section: &'static Section,
    pub id: &'static str,
    pub description: &'static str,
    pub outcome: Outcome,
    pub duration: Duration,
}

/// The results of a run.
#[derive(Clone, Debug)]
pub struct Report {
    pub server: String,
    pub profile: Profile,
    pub namespace: String,
    /// In the order the checks ran (the specification's).
    pub results: Vec<CheckReport>,
    /// What the cleanup could not do (objects or namespaces left behind).
    pub cleanup: Vec<String>,
    pub duration: Duration,
}

impl Report {
    pub fn passed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Passed))
    }
    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Failed(_)))
    }
    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Skipped(_)))
    }
    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.results.iter().filter(|r| f(&r.outcome)).count()
    }

    /// The ids of the failed checks, in order.
    pub fn failed_ids(&self) -> Vec<&'static str> {
        self.results
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Failed(_)))
            .map(|r| r.id)
            .collect()
    }

    /// One check's result by id.
    pub fn result(&self, id: &str) -> Option<&CheckReport> {
        self.results.iter().find(|r| r.id == id)
    }

    fn sections(&self) -> Vec<(&'static Section, Vec<&CheckReport>)> {
        let mut out: Vec<(&'static Section, Vec<&CheckReport>)> = Vec::new();
        for r in &self.results {
            match out.iter_mut().find(|(s, _)| std::ptr::eq(*s, r.section)) {
                Some((_, list)) => list.push(r),
                None => out.push((r.section, vec![r])),
            }
        }
        out
    }

    /// The tables: per section, one row per check, and under a failed or skipped check why.
    pub fn tables(&self) -> String {
        let width = self.results.iter().map(|r| r.id.len()).max().unwrap_or(10);
        let mut out = format!(
            "Conformance of {} (profile {}, namespace {})\n",
            self.server,
            self.profile.name(),
            self.namespace
        );
        for (section, results) in self.sections() {
            out.push_str(&format!("\n§{} {}\n", section.number, section.title));
            for r in results {
                out.push_str(&format!(
                    "  {:<8} {:<width$}  {}\n",
                    r.outcome.word(),
                    r.id,
                    r.description
                ));
                match &r.outcome {
                    Outcome::Passed => {}
                    Outcome::Skipped(reason) => {
                        out.push_str(&indent(&format!("skipped: {reason}"), 11));
                    }
                    Outcome::Failed(f) => {
                        out.push_str(&indent(&f.message, 11));
                        if let Some(exchange) = &f.exchange {
                            out.push_str(&indent(exchange, 13));
                        }
                    }
                }
            }
        }
        for problem in &self.cleanup {
            out.push_str(&format!("\ncleanup: {problem}\n"));
        }
        out.push_str(&format!(
            "\n{} checks: {} passed, {} failed, {} skipped ({:.1} s)\n",
            self.results.len(),
            self.passed(),
            self.failed(),
            self.skipped(),
            self.duration.as_secs_f64()
        ));
        out
    }

    /// The JSON summary.
    pub fn to_json(&self) -> Value {
        let checks: Vec<Value> = self
            .results
            .iter()
            .map(|r| {
                let mut v = json!({
                    "section": r.section.number,
                    "sectionTitle": r.section.title,
                    "id": r.id,
                    "description": r.description,
                    "result": match r.outcome {
                        Outcome::Passed => "passed",
                        Outcome::Failed(_) => "failed",
                        Outcome::Skipped(_) => "skipped",
                    },
                    "seconds": r.duration.as_secs_f64(),
                });
                match &r.outcome {
                    Outcome::Passed => {}
                    Outcome::Skipped(reason) => v["reason"] = json!(reason),
                    Outcome::Failed(f) => {
                        v["message"] = json!(f.message);
                        if let Some(e) = &f.exchange {
                            v["exchange"] = json!(e);
                        }
                    }
                }
                v
            })
            .collect();
        json!({
            "server": self.server,
            "profile": self.profile.name(),
            "namespace": self.namespace,
            "total": self.results.len(),
            "passed": self.passed(),
            "failed": self.failed(),
            "skipped": self.skipped(),
            "seconds": self.duration.as_secs_f64(),
            "cleanupProblems": self.cleanup,
            "checks": checks,
        })
    }

    /// JUnit XML: a `testsuite` per section, a `testcase` per check.
    pub fn to_junit(&self) -> String {
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        out.push_str(&format!(
            "<testsuites name=\"conformance\" tests=\"{}\" failures=\"{}\" skipped=\"{}\" time=\"{:.3}\">\n",
            self.results.len(),
            self.failed(),
            self.skipped(),
            self.duration.as_secs_f64()
        ));
        for (section, results) in self.sections() {
            let failures = results
                .iter()
                .filter(|r| matches!(r.outcome, Outcome::Failed(_)))
                .count();
            let skipped = results
                .iter()
                .filter(|r| matches!(r.outcome, Outcome::Skipped(_)))
                .count();
            let time: f64 = results.iter().map(|r| r.duration.as_secs_f64()).sum();
            out.push_str(&format!(
                "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" time=\"{time:.3}\">\n",
                xml(&format!("§{} {}", section.number, section.title)),
                results.len()
            ));
            for r in results {
                out.push_str(&format!(
                    "    <testcase classname=\"spec.{}\" name=\"{}\" time=\"{:.3}\">",
                    xml(section.number),
                    xml(&format!("{}: {}", r.id, r.description)),
                    r.duration.as_secs_f64()
                ));
                match &r.outcome {
                    Outcome::Passed => {}
                    Outcome::Skipped(reason) => {
                        out.push_str(&format!("<skipped message=\"{}\"/>", xml(reason)))
                    }
                    Outcome::Failed(f) => out.push_str(&format!(
                        "<failure message=\"{}\">{}</failure>",
                        xml(&f.message),
                        xml(f.exchange.as_deref().unwrap_or(""))
                    )),
                }
                out.push_str("</testcase>\n");
            }
            out.push_str("  </testsuite>\n");
        }
        out.push_str("</testsuites>\n");
        out
    }

    /// Writes the JUnit XML and the JSON summary for `--report FILE`; returns their paths.
    pub fn write_files(&self, file: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
        let (xml_path, json_path) = report_paths(file);
        if let Some(dir) = xml_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&xml_path, self.to_junit())?;
        let mut text = serde_json::to_string_pretty(&self.to_json()).unwrap_or_default();
        text.push('\n');
        std::fs::write(&json_path, text)?;
        Ok((xml_path, json_path))
    }
}

/// `FILE.xml` and `FILE.json`, or `FILE` and `FILE` with `.json` when `FILE` ends in `.xml`.
pub fn report_paths(file: &Path) -> (PathBuf, PathBuf) {
    if file.extension().is_some_and(|e| e == "xml") {
        (file.to_path_buf(), file.with_extension("json"))
    } else {
        let base = file.as_os_str().to_os_string();
        let mut xml = base.clone();
        xml.push(".xml");
        let mut json = base;
        json.push(".json");
        (PathBuf::from(xml), PathBuf::from(json))
    }
}

fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// Escapes text for an XML attribute or element, dropping characters XML 1.0 forbids.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    static SECTION: Section = Section {
        number: "4.5",
        title: "Watch",
        slug: "watch",
    };

    #[test]
    fn junit_and_json_name_every_check() {
        let report = Report {
            server: "http://x".into(),
            profile: Profile::Spec,
            namespace: "conformance-x".into(),
            results: vec![
                CheckReport {
                    section: &SECTION,
                    id: "a",
                    description: "first <one>",
                    outcome: Outcome::Passed,
                    duration: Duration::from_millis(5),
                },
                CheckReport {
                    section: &SECTION,
                    id: "b",
                    description: "second",
                    outcome: Outcome::Failed(Failure {
                        message: "expected \"x\"".into(),
                        exchange: Some("request: GET /\nresponse: 500".into()),
                    }),
                    duration: Duration::from_millis(5),
                },
            ],
            cleanup: vec![],
            duration: Duration::from_millis(10),
        };
        let xml = report.to_junit();
        assert!(xml.contains("name=\"a: first &lt;one&gt;\""), "{xml}");
        assert!(xml.contains("<failure message=\"expected &quot;x&quot;\">request: GET /&#10;response: 500</failure>"), "{xml}");
        assert!(
            xml.contains("tests=\"2\" failures=\"1\" skipped=\"0\""),
            "{xml}"
        );
        let json = report.to_json();
        assert_eq!(json["failed"], 1);
        assert_eq!(json["checks"][1]["message"], "expected \"x\"");
        let tables = report.tables();
        assert!(tables.contains("§4.5 Watch"), "{tables}");
        assert!(tables.contains("FAILED"), "{tables}");
        assert_eq!(
            report_paths(Path::new("out/r.xml")),
            (PathBuf::from("out/r.xml"), PathBuf::from("out/r.json"))
        );
        assert_eq!(
            report_paths(Path::new("out/r")),
            (PathBuf::from("out/r.xml"), PathBuf::from("out/r.json"))
        );
    }
}
