//! The embedded default: with no database URL configured, replaysafe runs its
//! own PostgreSQL cluster under `data_dir`, with the server binaries installed
//! on the machine. It is reused across starts and stopped when replaysafe stops.

use std::ffi::CString;
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::Secret;

pub const DATABASE_NAME: &str = "replaysafe";
const CLUSTER_DIR: &str = "postgres";
const PASSWORD_FILE: &str = "postgres.password";
const TOOLS: [&str; 3] = ["initdb", "pg_ctl", "postgres"];

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "no database_url or $DATABASE_URL is set, so replaysafe would start its own PostgreSQL, \
         but the server binaries (initdb, pg_ctl, postgres) are neither on PATH nor in \
         /usr/lib/postgresql/*/bin. Install them (Debian/Ubuntu: `apt-get install postgresql`; \
         Fedora: `dnf install postgresql-server`; macOS: `brew install postgresql`) or point \
         database_url at an existing server"
    )]
    NoBinaries,
    #[error("running as root, the embedded PostgreSQL must run as the `postgres` user, which does not exist: create it (`useradd --system postgres`) or set database_url")]
    NoPostgresUser,
    #[error("the `postgres` user cannot write to {0}: give it access to the path (every parent directory needs o+x) or choose another data_dir")]
    NotAccessible(PathBuf),
    #[error("{0} is not this user's alone (owned by uid {1}, mode {2:03o}): the embedded PostgreSQL's password and cluster live there; chown it to this user and chmod go-w it, or choose another data_dir")]
    NotPrivate(PathBuf, u32, u32),
    #[error("{0}")]
    Io(String),
    #[error("`{command}` failed: {detail}")]
    Command { command: String, detail: String },
}

fn io(context: &str, path: &Path, e: std::io::Error) -> EmbeddedError {
    EmbeddedError::Io(format!("{context} {}: {e}", path.display()))
}

/// A running private cluster; stopped on `stop` or drop.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    bin_dir: PathBuf,
    cluster_dir: PathBuf,
    run_as: Option<Account>,
    url: Secret,
    pub port: u16,
    pub reused_running: bool,
    stopped: AtomicBool,
}

#[derive(Debug, Clone, Copy)]
struct Account {
    uid: u32,
    gid: u32,
}

impl EmbeddedPostgres {
    /// Initialises the cluster if needed and starts it (blocking: run it on a
    /// blocking thread). Returns once PostgreSQL accepts connections.
    pub fn start(data_dir: &Path) -> Result<Self, EmbeddedError> {
        let bin_dir = find_bin_dir().ok_or(EmbeddedError::NoBinaries)?;
        // SAFETY: geteuid has no preconditions.
        let run_as = if unsafe { libc::geteuid() } == 0 {
            Some(postgres_account().ok_or(EmbeddedError::NoPostgresUser)?)
        } else {
            None
        };
        // Others may enter (the postgres user, when run as root), never write.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(data_dir)
            .map_err(|e| io("cannot create", data_dir, e))?;
        let data_dir = data_dir
            .canonicalize()
            .map_err(|e| io("cannot resolve", data_dir, e))?;
        check_private(&data_dir)?;
        let cluster_dir = data_dir.join(CLUSTER_DIR);
        let password_path = data_dir.join(PASSWORD_FILE);

        let mut pg = Self {
            bin_dir,
            cluster_dir: cluster_dir.clone(),
            run_as,
            url: Secret::new(String::new()),
            port: 0,
            reused_running: false,
            stopped: AtomicBool::new(true),
        };

        if !cluster_dir.join("PG_VERSION").exists() {
            pg.init(&data_dir, &password_path)?;
        }
        let password = read_private(&password_path)?;

        let running_port = if matches!(pg.pg_ctl(&["status"]), Ok(o) if o.status.success()) {
            read_port(&cluster_dir)
        } else {
            None
        };
        match running_port {
            Some(port) => {
                pg.port = port;
                pg.reused_running = true;
            }
            None => {
                pg.port = free_port()?;
                let log = cluster_dir.join("server.log");
                let options = format!(
                    "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''",
                    pg.port
                );
                let out = pg.pg_ctl(&[
                    "-w",
                    "-t",
                    "60",
                    "-l",
                    &log.to_string_lossy(),
                    "-o",
                    &options,
                    "start",
                ])?;
                if !out.status.success() {
                    return Err(EmbeddedError::Command {
                        command: "pg_ctl start".into(),
                        detail: format!(
                            "{} (see {})",
                            String::from_utf8_lossy(&out.stderr).trim(),
                            log.display()
                        ),
                    });
                }
            }
        }
        pg.stopped.store(false, Ordering::SeqCst);
        pg.url = Secret::new(format!(
            "postgres://postgres:{}@127.0.0.1:{}/{DATABASE_NAME}",
            password.trim(),
            pg.port
        ));
        Ok(pg)
    }

    /// URL of the replaysafe database (created by `db::ensure_database`).
    pub fn url(&self) -> &Secret {
        &self.url
    }

    pub fn cluster_dir(&self) -> &Path {
        &self.cluster_dir
    }

    /// Fast shutdown: open connections are closed, nothing committed is lost.
    /// A one-shot command (`user add`, `migrate`, ...) that found the cluster
    /// already running leaves it running: it belongs to the `serve` using it.
    pub fn leave_running_if_reused(&self) {
        if self.reused_running {
            self.stopped.store(true, Ordering::SeqCst);
        }
    }

    pub fn stop(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        match self.pg_ctl(&["-m", "fast", "-w", "-t", "60", "stop"]) {
            Ok(out) if out.status.success() => {
                tracing::info!(cluster = %self.cluster_dir.display(), "embedded PostgreSQL stopped")
            }
            Ok(out) => tracing::error!(
                "stopping the embedded PostgreSQL failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => tracing::error!("stopping the embedded PostgreSQL failed: {e}"),
        }
    }

    fn init(&self, data_dir: &Path, password_path: &Path) -> Result<(), EmbeddedError> {
        std::fs::create_dir_all(&self.cluster_dir)
            .map_err(|e| io("cannot create", &self.cluster_dir, e))?;
        std::fs::set_permissions(&self.cluster_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io("cannot restrict", &self.cluster_dir, e))?;
        let password = random_password();
        // initdb reads the superuser's password from a file the cluster owner can read.
        let pwfile = data_dir.join(".initdb-password");
        write_private(&pwfile, &password)?;
        if let Some(account) = self.run_as {
            chown(&self.cluster_dir, account)?;
            chown(&pwfile, account)?;
            let probe = self
                .command("test")
                .arg("-w")
                .arg(&self.cluster_dir)
                .status();
            if !matches!(probe, Ok(s) if s.success()) {
                let _ = std::fs::remove_file(&pwfile);
                return Err(EmbeddedError::NotAccessible(self.cluster_dir.clone()));
            }
        }
        let out = self
            .command(&self.bin_dir.join("initdb").to_string_lossy())
            .arg("-D")
            .arg(&self.cluster_dir)
            .args(["-U", "postgres", "-A", "scram-sha-256", "-E", "UTF8"])
            .args(["--locale=C", "--no-instructions"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .output();
        let _ = std::fs::remove_file(&pwfile);
        let out = out.map_err(|e| EmbeddedError::Command {
            command: "initdb".into(),
            detail: e.to_string(),
        })?;
        if !out.status.success() {
            return Err(EmbeddedError::Command {
                command: "initdb".into(),
                detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        write_private(password_path, &password)?;
        tracing::info!(cluster = %self.cluster_dir.display(), "initialised a new PostgreSQL cluster");
        Ok(())
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = match self.run_as {
            Some(_) => {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--", program]);
                c
            }
            None => Command::new(program),
        };
        // The postgres user may not be able to enter the caller's directory.
        cmd.current_dir(self.cluster_dir.parent().unwrap_or(Path::new("/")));
        cmd
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<Output, EmbeddedError> {
        self.command(&self.bin_dir.join("pg_ctl").to_string_lossy())
            .arg("-D")
            .arg(&self.cluster_dir)
            .args(args)
            .output()
            .map_err(|e| EmbeddedError::Command {
                command: "pg_ctl".into(),
                detail: e.to_string(),
            })
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A directory holding all server tools: PATH first, then Debian's layout, newest version first.
fn find_bin_dir() -> Option<PathBuf> {
    let has_all = |dir: &Path| TOOLS.iter().all(|t| dir.join(t).is_file());
    let from_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            Some((version, e.path().join("bin")))
        })
        .collect();
    debian.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
    from_path
        .into_iter()
        .chain(debian.into_iter().map(|(_, p)| p))
        // Debian's /usr/bin/pg_ctl is a wrapper script; the real tools sit together.
        .find(|dir| has_all(dir))
}

fn postgres_account() -> Option<Account> {
    let name = CString::new("postgres").ok()?;
    // SAFETY: getpwnam returns NULL or a pointer to static storage, read at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    // SAFETY: pw is non-null and points to a valid passwd record.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Some(Account { uid, gid })
}

fn chown(path: &Path, account: Account) -> Result<(), EmbeddedError> {
    std::os::unix::fs::chown(path, Some(account.uid), Some(account.gid))
        .map_err(|e| io("cannot hand to the postgres user", path, e))
}

/// `data_dir` must be owned by the running user and writable by no one
/// else: whoever could write there could plant a symlink where the
/// password is written, or replace the cluster.
fn check_private(data_dir: &Path) -> Result<(), EmbeddedError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(data_dir).map_err(|e| io("cannot read", data_dir, e))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(EmbeddedError::NotPrivate(
            data_dir.to_owned(),
            meta.uid(),
            meta.mode() & 0o777,
        ));
    }
    Ok(())
}

/// Writes a new file only this user reads: never through a symlink planted
/// at `path` (`O_NOFOLLOW`, `O_EXCL`); one left by an earlier try goes first.
fn write_private(path: &Path, text: &str) -> Result<(), EmbeddedError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(io("cannot replace", path, e))
        }
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(path)
        .map_err(|e| io("cannot write", path, e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| io("cannot write", path, e))
}

/// Reads the password file, never through a symlink, making sure on the
/// way that only this user can read it (0600, on the open file).
fn read_private(path: &Path) -> Result<String, EmbeddedError> {
    use std::io::Read;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| io("cannot read the cluster password from", path, e))?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| io("cannot restrict", path, e))?;
    let mut text = String::new();
    f.read_to_string(&mut text)
        .map_err(|e| io("cannot read the cluster password from", path, e))?;
    Ok(text)
}

fn random_password() -> String {
    use rand::Rng;
    let bytes: [u8; 24] = rand::thread_rng().gen();
    hex::encode(bytes)
}

fn free_port() -> Result<u16, EmbeddedError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| EmbeddedError::Io(format!("cannot find a free port: {e}")))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| EmbeddedError::Io(format!("cannot find a free port: {e}")))
}

/// postmaster.pid's fourth line is the port the running server listens on.
fn read_port(cluster_dir: &Path) -> Option<u16> {
    let pid_file = std::fs::read_to_string(cluster_dir.join("postmaster.pid")).ok()?;
    pid_file.lines().nth(3)?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_never_written_or_read_through_a_planted_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let planted = dir.path().join("postgres.password");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        assert!(read_private(&planted).is_err(), "read through a symlink");
        // Written over: the link goes, a new private file takes its place.
        write_private(&planted, "secret").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert!(!std::fs::symlink_metadata(&planted).unwrap().is_symlink());
        let mode = std::fs::metadata(&planted).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read_private(&planted).unwrap(), "secret");
        let mode = std::fs::metadata(&planted).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "re-asserted on read");
    }

    #[test]
    fn a_data_dir_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_private(dir.path()).is_ok());
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            check_private(dir.path()),
            Err(EmbeddedError::NotPrivate(_, _, 0o777))
        ));
        let refused = EmbeddedPostgres::start(dir.path()).unwrap_err();
        assert!(refused.to_string().contains("chmod go-w"), "{refused}");
    }
}
