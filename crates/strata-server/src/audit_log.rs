//! The audit log backend: `--audit-log-path` as kube-apiserver writes it, one JSON Event per
//! line, rotated by size as its lumberjack logger rotates (`--audit-log-maxsize`,
//! `--audit-log-maxbackup`, `--audit-log-maxage`).
//!
//! The frontend (`strata_http::audit`) evaluates the policy and makes the events; this module
//! only gives its writer thread somewhere to write. A rotated file is renamed
//! `<name>-<UTC time as 2006-01-02T15-04-05.000><ext>` beside the log (`audit.log` becomes
//! `audit-2026-11-26T02-30-00.123.log`), and a new file is started; then the oldest rotated
//! files beyond `maxbackup`, and those whose name's time is older than `maxage` days, are
//! removed. No crate writes lumberjack's names (file-rotate and its kin append a suffix after
//! the extension), so this is a small writer of our own.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata_http::audit::{AuditMetrics, Auditor, Backend, Mode, Policy, Writer};
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime};

use crate::config::{AuditConfig, AuditLogMode};

/// lumberjack's size limit when none is given: 100 MB.
const DEFAULT_MAX_MB: u64 = 100;

/// The auditing `config` asks for, with `policy` already read; `None` when there is no policy or
/// no log path (as kube-apiserver, which then audits nothing).
pub fn auditor(
    config: &AuditConfig,
    policy: Option<Policy>,
    metrics: Arc<AuditMetrics>,
) -> Result<Option<Auditor>, String> {
    let (Some(policy), Some(path)) = (policy, config.log_path.as_deref()) else {
        if config.policy_file.is_some() {
            tracing::warn!("--audit-policy-file without --audit-log-path: nothing is audited");
        }
        return Ok(None);
    };
    let writer: Box<dyn Writer> = if path == "-" {
        Box::new(Stdout(io::stdout()))
    } else {
        let max_mb = if config.log_maxsize == 0 {
            DEFAULT_MAX_MB
        } else {
            config.log_maxsize
        };
        Box::new(
            RotatingFile::open(
                PathBuf::from(path),
                max_mb * 1024 * 1024,
                config.log_maxbackup,
                config.log_maxage,
            )
            .map_err(|e| format!("audit log {path}: {e}"))?,
        )
    };
    let mode = match config.log_mode {
        AuditLogMode::Blocking => Mode::Blocking,
        AuditLogMode::Batch => Mode::Batch,
    };
    tracing::info!(path, mode = ?config.log_mode, "writing the audit log");
    Ok(Some(Auditor::new(
        policy,
        Backend::start(writer, mode, metrics),
    )))
}

/// Events on standard output (`--audit-log-path -`).
struct Stdout(io::Stdout);

impl Writer for Stdout {
    fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        self.0.lock().write_all(line)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.lock().flush()
    }
}

/// A log file rotated by size, lumberjack's way.
pub struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    max_backups: usize,
    max_age_days: u64,
    file: Option<BufWriter<File>>,
    size: u64,
}

impl RotatingFile {
    /// Opens (appending to) the log at `path`, creating its directory; nothing is rotated yet.
    pub fn open(
        path: PathBuf,
        max_bytes: u64,
        max_backups: usize,
        max_age_days: u64,
    ) -> io::Result<RotatingFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = RotatingFile {
            path,
            max_bytes,
            max_backups,
            max_age_days,
            file: None,
            size: 0,
        };
        f.open_existing()?;
        f.remove_old();
        Ok(f)
    }

    fn open_existing(&mut self) -> io::Result<()> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode_0600()
            .open(&self.path)?;
        self.size = file.metadata()?.len();
        self.file = Some(BufWriter::new(file));
        Ok(())
    }

    /// Renames the current file to its backup name and starts a new one.
    fn rotate(&mut self) -> io::Result<()> {
        if let Some(mut f) = self.file.take() {
            f.flush()?;
        }
        if self.path.exists() {
            std::fs::rename(
                &self.path,
                backup_name(&self.path, OffsetDateTime::now_utc()),
            )?;
        }
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode_0600()
            .open(&self.path)?;
        self.size = 0;
        self.file = Some(BufWriter::new(file));
        self.remove_old();
        Ok(())
    }

    /// Removes rotated files beyond `max_backups` (the oldest) and older than `max_age_days`.
    fn remove_old(&self) {
        if self.max_backups == 0 && self.max_age_days == 0 {
            return;
        }
        let mut backups = backups(&self.path);
        // Newest first.
        backups.sort_by_key(|b| std::cmp::Reverse(b.1));
        let cutoff = OffsetDateTime::now_utc() - time::Duration::days(self.max_age_days as i64);
        for (i, (path, at)) in backups.iter().enumerate() {
            let surplus = self.max_backups > 0 && i >= self.max_backups;
            let expired = self.max_age_days > 0 && *at < cutoff;
            if surplus || expired {
                if let Err(e) = std::fs::remove_file(path) {
                    tracing::warn!(path = %path.display(), error = %e, "removing an old audit log");
                }
            }
        }
    }
}

impl Writer for RotatingFile {
    fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        let len = line.len() as u64;
        if len > self.max_bytes {
            return Err(io::Error::other(format!(
                "write length {len} exceeds maximum file size {}",
                self.max_bytes
            )));
        }
        if self.file.is_none() {
            self.open_existing()?;
        }
        if self.size + len > self.max_bytes {
            self.rotate()?;
        }
        let file = self.file.as_mut().expect("opened above");
        file.write_all(line)?;
        self.size += len;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

/// New log files are readable by their owner only, as lumberjack makes them.
trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}

/// `dir/audit.log` at `t` → `dir/audit-2006-01-02T15-04-05.000.log`.
pub fn backup_name(path: &Path, t: OffsetDateTime) -> PathBuf {
    let (prefix, ext) = split_name(path);
    let stamp = t
        .format(format_description!(
            "[year]-[month]-[day]T[hour]-[minute]-[second].[subsecond digits:3]"
        ))
        .unwrap_or_default();
    path.with_file_name(format!("{prefix}-{stamp}{ext}"))
}

/// The file name's stem and extension (with its dot), as Go's `filepath.Ext` splits them.
fn split_name(path: &Path) -> (String, String) {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.rfind('.') {
        Some(dot) => (name[..dot].to_string(), name[dot..].to_string()),
        None => (name, String::new()),
    }
}

/// The rotated files beside `path`, with the times their names carry.
fn backups(path: &Path) -> Vec<(PathBuf, OffsetDateTime)> {
    let (prefix, ext) = split_name(path);
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("."),
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let format =
        format_description!("[year]-[month]-[day]T[hour]-[minute]-[second].[subsecond digits:3]");
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stamp = name
                .strip_prefix(&format!("{prefix}-"))?
                .strip_suffix(&ext)?;
            let at = PrimitiveDateTime::parse(stamp, format).ok()?.assume_utc();
            Some((e.path(), at))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_by_size_and_keeps_max_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/audit.log");
        let mut f = RotatingFile::open(path.clone(), 100, 2, 0).unwrap();
        let line = [b'x'; 39];
        for _ in 0..2 {
            f.write_line(&line).unwrap();
        }
        f.flush().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 78);
        for _ in 0..10 {
            f.write_line(&line).unwrap();
            // Distinct backup names: lumberjack's have millisecond resolution.
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        f.flush().unwrap();
        let names = backups(&path);
        assert_eq!(names.len(), 2, "{names:?}");
        for (p, _) in &names {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                name.starts_with("audit-") && name.ends_with(".log"),
                "{name}"
            );
            assert_eq!(std::fs::metadata(p).unwrap().len(), 78);
        }
        assert!(f.write_line(&[b'y'; 101]).is_err());
    }

    #[test]
    fn backup_names_are_lumberjacks() {
        let t = time::macros::datetime!(2026-11-26 02:30:00.123 UTC);
        assert_eq!(
            backup_name(Path::new("/var/log/audit.log"), t),
            PathBuf::from("/var/log/audit-2026-11-26T02-30-00.123.log")
        );
        assert_eq!(
            backup_name(Path::new("audit"), t),
            PathBuf::from("audit-2026-11-26T02-30-00.123")
        );
    }
}
