//! The embedded default: a private cluster under data_dir, reused on the next
//! start, stopped with nothing left running.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use replaysafe_core::db::embedded::EmbeddedPostgres;
use sqlx::Connection;

/// Whether a postgres process serves this cluster directory.
fn postgres_running_for(cluster: &Path) -> bool {
    let Ok(pid_file) = std::fs::read_to_string(cluster.join("postmaster.pid")) else {
        return false;
    };
    let pid = pid_file.lines().next().unwrap_or("").trim();
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn starts_reuses_and_stops_a_private_cluster() {
    let dir = tempfile::tempdir().unwrap();
    // The postgres user (when run as root) must be able to enter the directory.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data_dir = dir.path().join("data");

    let first = tokio::task::spawn_blocking({
        let d = data_dir.clone();
        move || EmbeddedPostgres::start(&d)
    })
    .await
    .unwrap()
    .expect("the embedded cluster starts");
    let cluster = first.cluster_dir().to_owned();
    assert!(postgres_running_for(&cluster));
    let password = std::fs::read_to_string(data_dir.join("postgres.password")).unwrap();
    let mode = std::fs::metadata(data_dir.join("postgres.password"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "the password file is private");

    // The URL works (password auth); the admin database always exists.
    let admin_url = first.url().expose().replace("/replaysafe", "/postgres");
    let mut conn = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    sqlx::query("CREATE TABLE kept (v int)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO kept VALUES (42)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    // A wrong password is refused: the cluster is not open to every local user.
    let wrong = admin_url.replace(password.trim(), "wrong");
    assert!(sqlx::PgConnection::connect(&wrong).await.is_err());

    first.stop();
    assert!(
        !postgres_running_for(&cluster),
        "postgres left running after stop"
    );

    // The second start reuses the cluster and its data.
    let second = tokio::task::spawn_blocking({
        let d = data_dir.clone();
        move || EmbeddedPostgres::start(&d)
    })
    .await
    .unwrap()
    .expect("the cluster starts again");
    let admin_url = second.url().expose().replace("/replaysafe", "/postgres");
    let mut conn = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    let kept: i32 = sqlx::query_scalar("SELECT v FROM kept")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(kept, 42);
    conn.close().await.unwrap();
    drop(second);
    assert!(
        !postgres_running_for(&cluster),
        "dropping stops postgres too"
    );
}
