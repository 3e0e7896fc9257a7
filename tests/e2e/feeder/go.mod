module landb-webhook.invalid/e2e/feeder

go 1.22
