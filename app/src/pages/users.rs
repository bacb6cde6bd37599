use leptos::prelude::*;
use replaysafe_types::auth::Role;

use crate::api::users::{
    list_users, AddUser, OneTimePassword, ResetUserPassword, SetUserEnabled, SetUserRole, UserRow,
};
use crate::components::*;
use crate::reader::{Reader, When};
use crate::Me;

/// Users (admin): who may sign in, with which role. A new account, or one
/// whose password is reset, gets a one-time password shown here once; its
/// owner chooses their own at the first sign-in. The last active admin can
/// be neither demoted nor disabled. Every change is in the audit log.
#[component]
pub fn UsersPage() -> impl IntoView {
    let add = ServerAction::<AddUser>::new();
    let reset = ServerAction::<ResetUserPassword>::new();
    let role = ServerAction::<SetUserRole>::new();
    let enabled = ServerAction::<SetUserEnabled>::new();
    let data = Resource::new(
        move || {
            (
                add.version().get(),
                reset.version().get(),
                role.version().get(),
                enabled.version().get(),
            )
        },
        |_| list_users(),
    );
    provide_context(reset);
    provide_context(role);
    provide_context(enabled);
    let failure = move || {
        [
            role.value().get().and_then(|r| r.err()),
            enabled.value().get().and_then(|r| r.err()),
        ]
        .into_iter()
        .flatten()
        .next()
        .map(|e| view! { <ErrorBox message=error_text(&e)/> })
    };
    view! {
        <section class="page">
            <h1>"Users"</h1>
            <p class="lede">
                "Who may sign in to this dashboard. Viewers read everything; operators also re-deliver, pause and resume; "
                "admins also force re-execution and manage users and tokens. A role change takes effect on the user's next request; "
                "disabling a user ends their sessions at once."
            </p>
            <IfRole role=Role::Admin>
                <h2>"Add a user"</h2>
                <ActionForm action=add attr:class="inline-form" attr:aria-label="Add a user">
                    <label>"Username" <input name="username" required maxlength="64" autocomplete="off"/></label>
                    <label>"Role"
                        <RoleSelect/>
                    </label>
                    <button type="submit" disabled=move || add.pending().get()>"Add user"</button>
                </ActionForm>
            </IfRole>
            {move || add.value().get().map(|r| match r {
                Ok(made) => view! { <OneTimeShown made verb="created"/> }.into_any(),
                Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
            })}
            {move || reset.value().get().map(|r| match r {
                Ok(made) => view! { <OneTimeShown made verb="given a new one-time password"/> }.into_any(),
                Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
            })}
            {failure}
            <h2>"Accounts"</h2>
            <Transition fallback=|| view! { <p class="muted">"Loading users…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(rows) => view! { <UserTable rows/> }.into_any(),
                        Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
            <p class="muted small">
                "The command line does the same on the database: " <code>"replaysafe users add|list|disable|enable"</code>
                " (it is not limited by the last-admin rule: it is how an admin locked out gets back in)."
            </p>
        </section>
    }
}

/// A one-time password, shown once.
#[component]
fn OneTimeShown(made: OneTimePassword, verb: &'static str) -> impl IntoView {
    view! {
        <div class="result ok" role="status" data-testid="one-time-password">
            <p>{format!("{} ({}) {verb}. Their one-time password, shown this once:", made.user.username, made.user.role.as_str())}</p>
            <p><code class="secret" data-testid="one-time-password-value">{made.password}</code></p>
            <p class="small">"Hand it over privately; at the first sign-in they choose their own."</p>
        </div>
    }
}

#[component]
fn UserTable(rows: Vec<UserRow>) -> impl IntoView {
    let reader = Reader::current();
    let me = use_context::<Me>();
    let my_id = move || {
        me.and_then(|m| m.get())
            .and_then(|r| r.ok())
            .flatten()
            .and_then(|c| c.user_id())
    };
    view! {
        <table class="data" data-testid="users-table">
            <thead>
                <tr>
                    <th scope="col">"Username"</th>
                    <th scope="col">"Role"</th>
                    <th scope="col">"State"</th>
                    <th scope="col">{reader.label("Created")}</th>
                    <th scope="col">{reader.label("Last sign-in")}</th>
                    <th scope="col"><span class="visually-hidden">"Actions"</span></th>
                </tr>
            </thead>
            <tbody>
                {rows.into_iter().map(|u| {
                    let state = match (u.disabled, u.must_change_password) {
                        (true, _) => "disabled",
                        (false, true) => "one-time password",
                        (false, false) => "active",
                    };
                    let yourself = my_id() == Some(u.id);
                    let (name, row_name) = (u.username.clone(), u.username.clone());
                    let created = view! { <When at=u.created_at/> };
                    let last = u.last_login_at.map_or_else(|| "never".into_any(), |t| view! { <When at=t ago=true/> }.into_any());
                    let for_role = u.clone();
                    view! {
                        <tr data-user=row_name data-state=state>
                            <td>{name}{yourself.then_some(" (you)")}</td>
                            <td><RoleControl user=for_role/></td>
                            <td>{state}</td>
                            <td>{created}</td>
                            <td>{last}</td>
                            <td><UserActions user=u yourself/></td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
fn RoleControl(user: UserRow) -> impl IntoView {
    let set = expect_context::<ServerAction<SetUserRole>>();
    let label = format!("Role of {}", user.username);
    let button = format!("Change the role of {}", user.username);
    view! {
        <ActionForm action=set attr:class="inline">
            <input type="hidden" name="id" value=user.id/>
            <RoleSelect selected=user.role label=label/>
            <button type="submit" class="secondary" aria-label=button>"Set"</button>
        </ActionForm>
    }
}

#[component]
fn UserActions(user: UserRow, yourself: bool) -> impl IntoView {
    let enabled = expect_context::<ServerAction<SetUserEnabled>>();
    let reset = expect_context::<ServerAction<ResetUserPassword>>();
    let (verb, class) = if user.disabled {
        ("Enable", "secondary")
    } else {
        ("Disable", "danger")
    };
    let toggle_label = format!("{verb} {}", user.username);
    let reset_label = format!("Reset the password of {}", user.username);
    view! {
        {(!yourself || user.disabled).then(|| view! {
            <ActionForm action=enabled attr:class="inline">
                <input type="hidden" name="id" value=user.id/>
                <input type="hidden" name="enabled" value=user.disabled.to_string()/>
                <button type="submit" class=class aria-label=toggle_label>{verb}</button>
            </ActionForm>
        })}
        {(!yourself).then(|| view! {
            <ActionForm action=reset attr:class="inline">
                <input type="hidden" name="id" value=user.id/>
                <button type="submit" class="secondary" aria-label=reset_label>"Reset password"</button>
            </ActionForm>
        })}
    }
}
