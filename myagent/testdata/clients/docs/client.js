// client.js
const WebSocket = require('ws');

class MyAgentClient {
    constructor(url = 'ws://localhost:8080') {
        this.url = url;
        this.ws = null;
        this.sessionId = null;
    }

    async connect() {
        return new Promise((resolve, reject) => {
            this.ws = new WebSocket(this.url);

            this.ws.on('open', () => {
                console.log('✅ 连接成功');
                resolve();
            });

            this.ws.on('message', (data) => {
                const message = JSON.parse(data.toString());
                this.handleMessage(message);
            });

            this.ws.on('close', () => {
                console.log('❌ 连接关闭');
            });

            this.ws.on('error', (error) => {
                console.error('连接错误:', error);
                reject(error);
            });
        });
    }

    handleMessage(data) {
        const { event, session_id, content } = data;

        switch (event) {
            case 'system.connected':
                this.createSession();
                break;

            case 'agent.session_created':
                this.sessionId = session_id;
                console.log('🚀 会话创建成功:', session_id);
                break;

            case 'agent.thinking':
                console.log('💭', content);
                break;

            case 'agent.final_answer':
                console.log('🎯 Agent回答:', content);
                break;

            case 'agent.error':
            case 'system.error':
                console.error('❌ 错误:', content);
                break;

            default:
                console.log('📨 其他消息:', data);
        }
    }

    createSession() {
        const message = {
            event: 'user.create_session',
            timestamp: new Date().toISOString(),
            content: 'create_session'
        };
        this.send(message);
    }

    sendMessage(content) {
        if (!this.sessionId) {
            console.error('会话未创建');
            return;
        }

        const message = {
            session_id: this.sessionId,
            event: 'user.message',
            timestamp: new Date().toISOString(),
            content: content
        };
        this.send(message);
    }

    send(message) {
        this.ws.send(JSON.stringify(message));
    }
}

// 使用示例
async function main() {
    const client = new MyAgentClient();
    
    try {
        await client.connect();
        
        // 等待会话创建
        setTimeout(() => {
            client.sendMessage('你好，请介绍一下自己');
        }, 1000);
        
    } catch (error) {
        console.error('连接失败:', error);
    }
}

main();
