{{- define "preemption-operator.labels" -}}
app.kubernetes.io/name: preemption-operator
{{- end }}
