use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = replaysafe::cli::Cli::parse();
    if !cli.serves() {
        // `replaysafe events list | head -1` ends quietly when `head` has
        // read its line, as other Unix tools do, instead of panicking on a
        // write to a closed pipe (Rust ignores SIGPIPE). Sockets are written
        // with MSG_NOSIGNAL, so connections are not affected; the server
        // keeps ignoring it.
        // SAFETY: before any thread starts; SIG_DFL is a valid disposition.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.runtime_threads())
        .enable_all()
        .build()
        .expect("starting the tokio runtime");
    // Dropped before the runtime: the last spans are exported on it.
    let _telemetry = {
        let _inside = runtime.enter();
        replaysafe_core::telemetry::init(&replaysafe_core::config::telemetry_settings(
            cli.config_path().as_deref(),
            cli.serves(),
        ))
    };
    match runtime.block_on(replaysafe::cli::run(cli)) {
        Ok(()) => std::process::ExitCode::from(replaysafe::cli::exit::OK),
        Err(e) => {
            eprintln!("replaysafe: {e}");
            std::process::ExitCode::from(e.exit_code())
        }
    }
}
