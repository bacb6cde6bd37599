use leptos::prelude::*;

use crate::auth::{must_change_password, ChangePassword};
use crate::components::{error_text, ErrorBox};

/// Your account: change your own password (every other session of yours
/// ends). A one-time password an admin set leads here first.
#[component]
pub fn AccountPage() -> impl IntoView {
    let change = ServerAction::<ChangePassword>::new();
    let first = Resource::new(move || change.version().get(), |_| must_change_password());
    view! {
        <section class="page">
            <h1>"Your account"</h1>
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    first.await.unwrap_or(false).then(|| view! {
                        <p class="result warn" role="status" data-testid="must-change">
                            "You signed in with a one-time password. Choose your own to go on."
                        </p>
                    })
                })}
            </Transition>
            <h2>"Change your password"</h2>
            <p class="small">
                "At least 10 characters. Every other session signed in as you ends; this one goes on."
            </p>
            <ActionForm action=change attr:class="stacked-form" attr:aria-label="Change your password">
                <label>"Current password"
                    <input type="password" name="current" autocomplete="current-password" required/>
                </label>
                <label>"New password"
                    <input type="password" name="new" autocomplete="new-password" minlength="10" required/>
                </label>
                <label>"New password again"
                    <input type="password" name="confirm" autocomplete="new-password" minlength="10" required/>
                </label>
                <button type="submit" disabled=move || change.pending().get()>"Change password"</button>
            </ActionForm>
            {move || change.value().get().map(|r| match r {
                Ok(()) => view! {
                    <p class="result ok" role="status" data-testid="password-changed">
                        "Your password is changed; your other sessions have ended. "
                        <a href="/overview">"Go to the overview"</a>
                    </p>
                }.into_any(),
                Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
            })}
        </section>
    }
}
