use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = replaysafe::cli::Cli::parse();
    replaysafe::telemetry::init(replaysafe::config::log_format(cli.config.as_deref()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.runtime_threads())
        .enable_all()
        .build()
        .expect("starting the tokio runtime");
    match runtime.block_on(replaysafe::cli::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("replaysafe: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
