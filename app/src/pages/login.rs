use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::auth::Login;
use crate::components::{error_text, ErrorBox};

#[component]
pub fn LoginPage() -> impl IntoView {
    let login = ServerAction::<Login>::new();
    let query = use_query_map();
    let next = move || query.with(|q| q.get("next").unwrap_or_default());
    let failure = move || {
        login
            .value()
            .get()
            .and_then(|result| result.err())
            .map(|e| view! { <ErrorBox message=error_text(&e)/> })
    };
    view! {
        <section class="page login-page">
            <h1>"Sign in"</h1>
            <p class="lede">"replaysafe's dashboard: every delivery, what the dedup layer did with it, and safe re-delivery."</p>
            <ActionForm action=login attr:class="login-form" attr:aria-label="Sign in">
                <input type="hidden" name="next" value=next/>
                <label>"Username"
                    <input name="username" autocomplete="username" required autofocus/>
                </label>
                <label>"Password"
                    <input type="password" name="password" autocomplete="current-password" required/>
                </label>
                <button type="submit" disabled=move || login.pending().get()>"Sign in"</button>
            </ActionForm>
            {failure}
            <p class="muted small">"Accounts are made with " <code>"replaysafe users add"</code> "."</p>
        </section>
    }
}
