/* wk_rpc_method.h: the RPCs the Worker serves, one number each. Shared by the request
 * validator (which decodes each method's request) and the gRPC server above it (which
 * names and routes them); exported by wk_validate, the lower of the two. */
#ifndef WK_RPC_METHOD_H
#define WK_RPC_METHOD_H

typedef enum wk_rpc_method {
  WK_RPC_REQUEST_TASK_SLOT = 0,  /* request: Worker__V1__RequestTaskSlotRequest */
  WK_RPC_SUBMIT_TASK = 1,        /* Worker__V1__SubmitTaskRequest */
  WK_RPC_GET_TASK_RESULT = 2,    /* Worker__V1__GetTaskResultRequest */
  WK_RPC_WATCH_TASKS = 3,        /* Worker__V1__WatchTasksRequest (server streaming) */
  WK_RPC_CANCEL_TASK = 4,        /* Worker__V1__CancelTaskRequest */
  WK_RPC_HEALTH_CHECK = 5,       /* Grpc__Health__V1__HealthCheckRequest */
  WK_RPC_HEALTH_WATCH = 6,       /* Grpc__Health__V1__HealthCheckRequest (server streaming) */
  WK_RPC_LIST_TASKS = 7,         /* Worker__V1__ListTasksRequest */
  WK_RPC_GET_TASK_LOGS = 8,      /* Worker__V1__GetTaskLogsRequest */
  WK_RPC_DEPLOY_CODE = 9,        /* Worker__V1__DeployCodeRequest */
  WK_RPC_SET_CURRENT_EPOCH = 10, /* Worker__V1__SetCurrentEpochRequest */
  WK_RPC_METHOD_COUNT = 11,
} wk_rpc_method;

#endif
